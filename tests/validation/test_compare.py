"""compare(): the bound, its boundary, the error statistics and the report's dict / JSON forms, by hand."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import sigdnn
from sigdnn import cli
from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.validation import compare, validate

TOL = Tolerance(atol=0.25, rtol=0.125)  # powers of two: every bound below is exact in float64


def test_an_error_equal_to_the_bound_passes_and_one_ulp_more_fails() -> None:
    want = np.array([4.0, -4.0, 0.0])
    at_bound = np.array([4.75, -4.75, 0.25])  # 0.25 + 0.125 * |want|
    assert compare("t", at_bound, want, TOL).mismatches == 0
    past = np.nextafter(at_bound, np.array([np.inf, -np.inf, np.inf]))
    c = compare("t", past, want, TOL)
    assert c.mismatches == 3 and not c.passed
    below = np.array([3.25, -3.25, -0.25])
    assert compare("t", below, want, TOL).passed
    assert compare("t", np.nextafter(below, -np.inf * np.sign(want + 0.5)), want, TOL).mismatches == 3


def test_the_reduction_term_scales_sum_of_absolute_terms() -> None:
    tol = Tolerance(atol=0.25, rtol=0.125, reduction=0.5)
    want, terms = np.array([4.0, 4.0]), np.array([2.0, 0.0])
    got = np.array([5.75, 4.75])  # bounds: 0.75 + 0.5 * 2 = 1.75, and 0.75
    assert compare("r", got, want, tol, terms).passed
    assert compare("r", np.nextafter(got, np.inf), want, tol, terms).mismatches == 2
    assert compare("r", got, want, tol).mismatches == 1  # no terms: no reduction allowance
    assert compare("r", got, want, TOL, terms).mismatches == 1  # no reduction factor: terms ignored


def test_error_statistics_and_the_worst_element() -> None:
    want = np.array([[1.0, 2.0], [100.0, -8.0]])
    got = np.array([[1.5, 2.0], [110.0, -8.5]])
    c = compare("s", got, want, Tolerance(atol=0.0, rtol=0.25))
    assert c.max_abs_error == 10.0
    assert c.max_rel_error == 0.5
    assert (c.mismatches, c.nan_inf_mismatches, c.size) == (1, 0, 4)
    assert c.worst_index == (0, 0)  # the mismatch, not the larger error within its bound
    assert (c.worst_got, c.worst_want) == (1.5, 1.0)
    assert c.name == "s" and c.dtype == "float64" and c.tolerance == Tolerance(atol=0.0, rtol=0.25)
    within = compare("s", got, want, Tolerance(atol=0.0, rtol=0.5))
    assert within.passed and within.worst_index == (1, 0)  # no mismatch: the largest error


def test_relative_error_against_zero_is_finite() -> None:
    c = compare("z", np.array([1e-300]), np.array([0.0]), Tolerance(atol=1e-290, rtol=0.0))
    assert c.passed
    assert c.max_rel_error == 1e-300 / np.finfo(np.float64).tiny


def test_special_values_must_match_and_rank_first() -> None:
    want = np.array([1.0, np.nan, np.inf, -np.inf, 2.0])
    assert compare("n", want.copy(), want, TOL).passed
    got = np.array([1.0, np.inf, np.inf, np.inf, 9.0])
    c = compare("n", got, want, TOL)
    assert (c.nan_inf_mismatches, c.mismatches) == (2, 1)
    assert c.worst_index == (1,)  # a wrong special value outranks any finite error
    assert c.max_abs_error == 7.0 and c.max_rel_error == 3.5  # special positions count no error
    only_special = compare("n", np.array([np.nan, 1.0]), np.array([1.0, 1.0]), TOL)
    assert (only_special.mismatches, only_special.nan_inf_mismatches, only_special.passed) == (0, 1, False)
    assert compare("n", np.array([-np.inf]), np.array([np.inf]), TOL).nan_inf_mismatches == 1


def test_exact_tolerance() -> None:
    want = np.array([3, -7, 2**40], dtype=np.int64)
    c = compare("i", want.copy(), want, Tolerance(0.0, 0.0, exact=True))
    assert c.passed and c.max_abs_error == 0.0
    off = compare("i", want + np.array([0, 1, 0]), want, Tolerance(0.0, 0.0, exact=True))
    assert (off.mismatches, off.worst_index, off.worst_got, off.worst_want) == (1, (1,), -6.0, -7.0)
    assert off.dtype == "int64"


def test_empty_tensors_compare_clean() -> None:
    c = compare("e", np.zeros((0, 3)), np.zeros((0, 3)), TOL)
    assert c.passed and c.size == 0
    assert (c.worst_index, c.worst_got, c.worst_want, c.max_abs_error, c.max_rel_error) == (None, None, None, 0, 0)


@pytest.mark.parametrize(
    ("dtype", "want", "got", "ulps"),
    [
        ("float16", 1.0, 1.0 + 2.0**-9, 2.0),  # ulp(1) = 2**-10 in float16
        ("float16", 1.5, 1.5 - 2.0**-10, 1.0),
        ("float16", 0.0, 2.0**-23, 2.0),  # subnormal spacing 2**-24
        ("float16", 2.0**-20, 2.0**-20 + 2.0**-24, 1.0),  # a subnormal value: same spacing
        ("float16", 65504.0, 65472.0, 1.0),  # top binade: spacing 32
        ("bfloat16", 3.0, 3.0 + 2.0**-5, 2.0),  # ulp(3) = 2**-6 in bfloat16
        ("float8_e4m3fn", -1.0, -1.25, 2.0),  # 3 mantissa bits: ulp(1) = 2**-3
        ("float32", 2.0**-130, 2.0**-130 + 2.0**-149, 1.0),  # float32 subnormals: 2**-149
        ("int32", 5, 8, 3.0),  # integers: one ulp is 1
    ],
)
def test_ulp_error_counts_the_output_dtypes_spacing_at_the_reference_value(
    dtype: str, want: float, got: float, ulps: float
) -> None:
    numpy_dtype = sigdnn.dtypes.as_data_type(dtype).numpy
    c = compare("u", np.array([got]), np.array([want]).astype(numpy_dtype), Tolerance(atol=0.0, rtol=1.0))
    assert c.max_ulp_error == ulps


def test_ulp_error_of_an_exact_match_and_of_an_empty_tensor_is_zero() -> None:
    want = np.array([0.5, -3.0], dtype=np.float16)
    assert compare("e", want.astype(np.float64), want, TOL).max_ulp_error == 0.0
    assert compare("e", np.zeros(0), np.zeros(0, np.float16), TOL).max_ulp_error == 0.0


def test_ulp_error_ignores_special_values() -> None:
    want = np.array([np.inf, np.nan, 1.0], dtype=np.float16)
    c = compare("s", np.array([np.inf, np.nan, 1.0 + 2.0**-10]), want, TOL)
    assert c.max_ulp_error == 1.0


def test_as_dict_is_json_ready() -> None:
    c = compare("d", np.array([1.0, 3.0]), np.array([1.0, 2.0]), TOL)
    d = c.as_dict()
    assert d == {
        "name": "d",
        "dtype": "float64",
        "tolerance": "atol 0.25 rtol 0.125",
        "max_abs_error": 1.0,
        "max_rel_error": 0.5,
        "max_ulp_error": 2.0**51,  # float64 ulp at 2.0 is 2**-51
        "mismatches": 1,
        "size": 2,
        "worst_index": (1,),
        "worst_got": 3.0,
        "worst_want": 2.0,
        "nan_inf_mismatches": 0,
        "passed": False,
    }
    assert json.loads(json.dumps(d))["worst_index"] == [1]


# -- the report, through an integer graph (exact tolerances) ------------------
class OffByOne(NodePlan):
    def execute(self, buffers: Any, context: Any = None) -> None:
        buffers["out_0"][...] = buffers["in_0"] + buffers["in_1"] + 1


class OffByOneAdd(PlanBuilder):
    name, engine_id, library, ops, priority = "plugin.off_by_one", 30502, "plugin", ("pointwise",), 10

    def serves(self, key: Any) -> bool:
        return key.trait("mode") == "add"

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        return OffByOne()


def integer_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("ints", io_dtype="int32", compute_dtype="int32")
    a, b = g.tensor("a", (3,)), g.tensor("b", (3,))
    g.pointwise("mul", g.pointwise("add", a, b, name="sum"), b, name="prod").set_output(True).set_name("y")
    return g


def off_by_one() -> sigdnn.Executor:
    registry = Registry()
    registry.register(OffByOneAdd())
    return sigdnn.Executor(registry=registry)


INPUTS = {"a": np.array([1, -2, 3], np.int32), "b": np.array([4, 5, -6], np.int32)}


def test_integer_graphs_validate_exactly() -> None:
    report = validate(integer_graph(), INPUTS, executor=off_by_one())
    assert not report.passed
    verdicts = {c.node: (c.comparison.passed, c.comparison.tolerance.exact) for c in report.nodes}
    assert verdicts == {"sum": (False, True), "prod": (True, True)}  # prod is right for the inputs it got
    (out,) = report.outputs
    assert out.tolerance.exact and out.mismatches == 3
    assert (out.worst_index, out.worst_got, out.worst_want) == ((2,), (3 - 6 + 1) * -6, (3 - 6) * -6)
    good = validate(integer_graph(), INPUTS, executor=sigdnn.Executor(registry=Registry()))
    assert good.passed


def test_report_json(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    report = validate(integer_graph(), INPUTS, executor=off_by_one())
    data = json.loads(report.to_json())
    assert data["graph"] == "ints" and data["passed"] is False
    assert [(n["node"], n["builder"], n["passed"]) for n in data["nodes"]] == [
        ("sum", "plugin.off_by_one", False),
        ("prod", "reference.pointwise", True),
    ]
    assert data["nodes"][0]["tolerance"] == "exact" and data["nodes"][0]["mismatches"] == 3
    assert data["outputs"][0]["name"] == "y" and data["outputs"][0]["max_abs_error"] == 6.0

    # The command writes the same JSON (a CPU stand-in for the GPU backend) and exits 1 on FAIL.
    path = tmp_path / "g.sdg"
    path.write_bytes(integer_graph().serialize())
    monkeypatch.setattr(
        sigdnn, "validate", lambda g, given, seed, executor, truth: validate(g, INPUTS, executor=off_by_one())
    )
    monkeypatch.setattr("sigdnn.cli.validate.check_backend", lambda backend, default_gpu=False: None)
    out = tmp_path / "report.json"
    assert cli.main(["validate", str(path), "--backend", "reference", "--report", str(out)]) == 1
    written = json.loads(out.read_text())
    assert written["passed"] is False
    assert written["runs"] == [{"file": str(path), "seed": 0, **data}]


def test_an_inf_against_a_finite_value_is_a_special_mismatch_and_specials_count_no_error() -> None:
    c = compare("f", np.array([np.inf, -np.inf, 1.0]), np.array([2.0, -3.0, 1.0]), TOL)
    assert (c.nan_inf_mismatches, c.mismatches, c.passed) == (2, 0, False)
    assert (c.max_abs_error, c.max_rel_error) == (0.0, 0.0)  # the finite pair is exact; specials add nothing
    same = compare("f", np.array([np.nan, np.inf, 3.0]), np.array([np.nan, np.inf, 3.0]), TOL)
    assert same.passed and (same.max_abs_error, same.max_rel_error) == (0.0, 0.0)


@pytest.mark.parametrize(("off", "passes"), [(0.999, True), (1.001, False)])
def test_without_carried_errors_the_inner_rtol_scales_the_value(off: float, passes: bool) -> None:
    """A region exit checked without the errors carried to it (a direct compare): inner * |want| stands in."""
    tolerance = Tolerance(0.0, 1e-3, inner=2e-3)
    want = np.array([4.0])
    got = want + off * (1e-3 + 2e-3) * 4.0
    assert compare("y", got, want, tolerance).passed == passes
    assert compare("y", got, want, tolerance, carried=np.array([0.0])).passed == (off < 1 / 3)
