"""One case judged in-process: the reference result, the verdict row, ulps against NumPy's spacing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import ml_dtypes
import numpy as np
import pytest
from broken_plugin_builders import BrokenPointwise, GoodPointwise

import sigdnn
from sigdnn.campaign.cases import generate_cases
from sigdnn.campaign.judge import FAIL, PASS, compute_reference, executor_for, judge, max_ulps, shape_facts, ulp
from sigdnn.campaign.spec import parse_spec
from sigdnn.dtypes import DataType
from sigdnn.registry import DEFAULT_REGISTRY, NodePlan, PlanBuilder
from sigdnn.validation import random_inputs


@pytest.fixture
def plugin() -> Iterator[None]:
    for builder in (BrokenPointwise, GoodPointwise):
        sigdnn.register(builder, replace=True)
    yield
    for builder in (BrokenPointwise, GoodPointwise):
        DEFAULT_REGISTRY.unregister(builder.engine_id)


def cases(shapes: str, engines: str = '["broken.pointwise"]', extra: str = "", dtypes: str = '["float16"]') -> list:
    text = (
        f'backend = "reference"\nengines = {engines}\nseeds = [7]\n{extra}'
        f'[[generate]]\nop = "pointwise"\nmodes = ["add"]\ndtypes = {dtypes}\nshapes = {shapes}\n'
    )
    return list(generate_cases(parse_spec(text, __import__("pathlib").Path("."))).cases)


def test_the_reference_result_is_the_seeded_inputs_and_the_reference_outputs() -> None:
    (case,) = cases("[[2, 9]]")
    result = compute_reference(case.graph, case.seed)
    g = sigdnn.deserialize(case.graph)
    want_inputs = random_inputs(g, 7)
    assert result.inputs.keys() == want_inputs.keys() == {"in_0", "in_1"}
    for name, value in want_inputs.items():
        np.testing.assert_array_equal(result.inputs[name], value)
    exact = (want_inputs["in_0"].astype(np.float64) + want_inputs["in_1"].astype(np.float64)).astype(np.float16)
    np.testing.assert_array_equal(result.outputs["out"], exact)
    assert result.outputs["out"].dtype == np.float16 and 0 < result.seconds < 3600  # a duration, not a clock reading


class Outranking(PlanBuilder):
    name: ClassVar[str] = "impostor.pointwise"
    engine_id: ClassVar[int] = 30190
    library: ClassVar[str] = "impostor"
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)
    priority: ClassVar[int] = 50

    def build(self, node: Any, graph: Any, context: Any) -> NodePlan:
        return NeverRun()


class NeverRun(NodePlan):
    def execute(self, buffers: Any, context: Any = None) -> None:
        raise AssertionError("never run: the reference side plans with the reference builders alone")


def test_a_plugin_that_outranks_the_reference_never_stands_in_for_the_ground_truth() -> None:
    (case,) = cases("[[3]]")
    want = compute_reference(case.graph, case.seed)
    sigdnn.register(Outranking)
    try:
        got = compute_reference(case.graph, case.seed)  # NeverRun would raise if the impostor were planned
    finally:
        DEFAULT_REGISTRY.unregister(30190)
    for name, value in want.outputs.items():
        np.testing.assert_array_equal(got.outputs[name], value)


def test_a_failing_case_row_names_the_worst_element(plugin: None) -> None:
    (case,) = cases("[[2, 10]]")
    reference = compute_reference(case.graph, case.seed)
    row = judge(case, reference)
    assert row["verdict"] == FAIL == "fail" and row["case"] == case.case_id and row["seed"] == 7  # the file's word
    assert row["builders"] == ["broken.pointwise"] and row["device"] == "cpu"
    assert row["mismatches"] == 2 * (2 * 2)  # 2 rows x 2 elements past index 7, in the step and end to end
    worst = row["worst"]
    assert worst["tensor"] == "out" and worst["index"][1] in (8, 9)
    want = reference.outputs["out"][tuple(worst["index"])]
    assert worst["want"] == float(want) and worst["got"] == float(np.float16(float(want) + 1.0))
    assert row["max_abs_error"] == pytest.approx(max(abs(float(np.float16(w + 1.0)) - w) for w in
                                                     reference.outputs["out"][:, 8:].astype(float).ravel()))  # fmt: skip
    assert row["max_rel_error"] > 0 and row["max_ulp_error"] > 100
    assert row["key"] == "Pointwise[add](f16,f16->f16; f32)" and row["family"] == "pointwise[add]"
    assert row["dtypes"] == ["float16"] and row["shapes"] == {"in_0": [2, 10], "in_1": [2, 10], "out": [2, 10]}
    assert 0 < row["seconds"] < 3600 and worst["tolerance"].startswith("atol")


def test_a_passing_case_has_zero_errors_and_an_engine_that_declines_is_an_error_row(plugin: None) -> None:
    (good,) = cases("[[2, 10]]", engines='["good.pointwise"]')
    row = judge(good, compute_reference(good.graph, good.seed))
    assert (row["verdict"], row["max_abs_error"], row["max_ulp_error"], row["mismatches"]) == ("pass", 0.0, 0.0, 0)
    (small,) = cases("[[2, 8]]")
    assert judge(small, compute_reference(small.graph, small.seed))["verdict"] == PASS
    (declined,) = cases("[[4]]", dtypes='["int32"]')
    row = judge(declined, compute_reference(declined.graph, declined.seed))
    assert 0 < row["seconds"] < 3600  # an error row still says how long the case took
    assert row["verdict"] == "error" and row["error"].startswith("NoPlanError") and "port in_0 is int32" in row["error"]
    assert "max_abs_error" not in row


def test_a_tolerance_override_replaces_the_computed_one(plugin: None) -> None:
    (case,) = cases("[[1, 9]]", extra="[tolerance]\natol = 1.5\n")
    assert judge(case, compute_reference(case.graph, case.seed))["verdict"] == PASS
    (tight,) = cases("[[1, 9]]", extra="[tolerance]\natol = 0.5\n")
    assert judge(tight, compute_reference(tight.graph, tight.seed))["verdict"] == FAIL


def test_one_executor_per_backend_and_engine_in_a_worker() -> None:
    a = executor_for("reference", "broken.pointwise")
    assert executor_for("reference", "broken.pointwise") is a
    assert executor_for("reference", "good.pointwise") is not a and a.engine == "broken.pointwise"


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_ulp_is_numpys_spacing(dtype: type) -> None:
    rng = np.random.default_rng(0)
    tiny = float(np.finfo(dtype).smallest_subnormal)
    values = np.concatenate([rng.uniform(-4, 4, 200), [0.0, 1.0, -1.0, 2.0, tiny, 3 * tiny, 1e-30, 6e4]]).astype(dtype)
    values = values[np.isfinite(values)]
    want = np.spacing(np.abs(values)).astype(np.float64)
    got = ulp(values.astype(np.float64), DataType.FLOAT32 if dtype is np.float32 else DataType.FLOAT16)
    np.testing.assert_array_equal(got, want)


def test_ulp_of_bfloat16_and_fp8() -> None:
    values = np.array([1.0, 1.5, 2.0, -3.0, 0.0], dtype=np.float64)
    np.testing.assert_array_equal(ulp(values, DataType.BFLOAT16), [2**-7, 2**-7, 2**-6, 2**-6, 2.0**-133])
    tiny = float(ml_dtypes.finfo(ml_dtypes.float8_e4m3fn).smallest_subnormal)
    np.testing.assert_array_equal(ulp(np.array([1.0, 0.0]), DataType.FP8_E4M3), [2**-3, tiny])


def test_max_ulps_over_every_output_skips_non_finite_and_counts_integers_plainly() -> None:
    g = sigdnn.Graph("two", io_dtype="float16")
    x = g.tensor("x", dims=(3,))
    g.pointwise("exp", x).set_output(True).set_name("e")
    g.pointwise("cmp_gt", x, x).set_output(True).set_name("c").set_data_type("int32")
    want = {"e": np.array([1.0, 2.0, np.inf]), "c": np.array([0, 1, 3])}
    got = {"e": np.array([1.0 + 2 * 2**-10, 2.0, 5.0]), "c": np.array([0, 1, 0])}
    assert max_ulps(g, got, want) == 3.0
    got["c"] = want["c"]
    assert max_ulps(g, got, want) == 2.0
    assert max_ulps(g, want, want) == 0.0
    facts = shape_facts(g)
    assert facts["family"] == "pointwise[exp]+pointwise[cmp_gt]" and facts["dtypes"] == ["float16", "int32"]
    assert facts["shapes"] == {"x": [3], "e": [3], "c": [3]}


def test_the_gpu_truths_reference_result_is_the_cpu_truths(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the GPU truth (emulated here) the spread runs stay on its device; the result that comes back, outputs
    and spread, is the CPU truth's to the bit (the same draws)."""
    from gpu_reference_emulation import gpu_reference_executor, make_available

    from sigdnn.campaign import judge as judge_module

    g = sigdnn.Graph("chain", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", (4, 40))
    g.pointwise("tanh_fwd", g.pointwise("mul", x, x, name="square"), name="tanh").set_output(True).set_name("y")
    by_cpu = compute_reference(g.serialize(), 3, truth="cpu")
    make_available(monkeypatch)
    monkeypatch.setattr(judge_module, "truth_executor", lambda truth, **kw: gpu_reference_executor(fusion=False))
    by_gpu = compute_reference(g.serialize(), 3)
    assert by_cpu.spread is not None and by_gpu.spread is not None
    assert all(isinstance(v, np.ndarray) for v in [*by_gpu.outputs.values(), *by_gpu.spread.values()])
    assert by_gpu.outputs.keys() == by_cpu.outputs.keys() and by_gpu.spread.keys() == by_cpu.spread.keys()
    for name in by_cpu.outputs:
        assert np.array_equal(by_gpu.outputs[name], by_cpu.outputs[name])
    for uid in by_cpu.spread:
        assert np.array_equal(by_gpu.spread[uid], by_cpu.spread[uid]) and by_cpu.spread[uid].max() > 0
