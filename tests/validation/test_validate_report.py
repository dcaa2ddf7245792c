"""validate()'s plumbing: which executors it builds, what inputs it accepts, what its report says."""

from __future__ import annotations

import importlib
import json

import numpy as np
import pytest

import sigdnn
from sigdnn.registry.registry import REFERENCE_ONLY
from sigdnn.validation import validate

validate_module = importlib.import_module("sigdnn.validation.checks")  # the package's `validate` is the function
truth_module = importlib.import_module("sigdnn.validation.truth")


def affine() -> sigdnn.Graph:
    """y = x * scale + bias: an input, a pass-by-value scalar and a constant tensor."""
    g = sigdnn.Graph("affine", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (2, 3))
    scaled = g.pointwise("mul", x, g.scalar("scale", 3.0), name="scale")
    bias = g.constant("bias", np.array([[1.0, -2.0, 0.5]], np.float32))
    g.pointwise("add", scaled, bias, name="shift").set_output(True).set_name("y")
    return g


X = np.array([[1.0, 2.0, -1.0], [0.5, 0.0, 4.0]], np.float32)


@pytest.mark.parametrize("key", ["name", "uid", "tensor"])
def test_inputs_may_be_keyed_as_the_executor_accepts(key: str) -> None:
    g = affine()
    x = g.tensor_by_name("x")
    data = {{"name": "x", "uid": x.uid, "tensor": x}[key]: X}
    report = validate(g, data, executor=sigdnn.Executor())
    assert report.passed, report.table()
    assert [c.node for c in report.nodes] == ["scale", "shift"]
    assert all(c.comparison.max_abs_error == 0 for c in report.nodes)


class WrongShift(sigdnn.registry.NodePlan):
    """x + bias + 1: wrong by exactly 1 everywhere."""

    def execute(self, buffers, context=None) -> None:
        buffers["out_0"][...] = buffers["in_0"] + buffers["in_1"] + 1


class WrongShiftBuilder(sigdnn.registry.PlanBuilder):
    name, engine_id, library, ops, priority = "plugin.wrong_shift", 31300, "plugin", ("pointwise",), 10

    def serves(self, key) -> bool:
        return key.trait("mode") == "add"

    def build(self, node, graph, context):
        return WrongShift()


def wrong_device() -> sigdnn.Executor:
    registry = sigdnn.registry.Registry()
    registry.register(WrongShiftBuilder())
    return sigdnn.Executor("reference", registry=registry)


def test_the_step_check_feeds_each_node_the_scalar_and_constant_the_device_saw() -> None:
    """The device's 'shift' is off by exactly 1: the step check sees 1, computed from x * 3 + bias."""
    report = validate(affine(), {"x": X}, executor=wrong_device())
    shift = report.nodes[1].comparison
    assert (report.nodes[0].comparison.max_abs_error, shift.max_abs_error) == (0, 1)
    assert shift.mismatches == 6 and not report.passed
    assert report.outputs[0].max_abs_error == 1


def test_validate_builds_the_reference_unfused_and_the_named_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    made = []
    real = sigdnn.Executor

    def recording(backend: str, **kwargs):
        made.append((backend, kwargs))
        return real("reference", **kwargs)

    monkeypatch.setattr(validate_module, "Executor", recording)
    monkeypatch.setattr(truth_module, "Executor", recording)
    validate(affine(), {"x": X}, truth="cpu")
    truth = {"fusion": False, "registry": REFERENCE_ONLY}  # the reference builders alone
    assert made == [("reference", truth), ("gpu", {})]  # gpu is the default backend
    made.clear()
    validate(affine(), {"x": X}, executor=real(), truth="cpu")
    assert made == [("reference", truth)]


def test_the_default_inputs_are_random_inputs_with_seed_zero() -> None:
    g = affine()
    default = validate(g, executor=wrong_device())
    seeded = validate(g, seed=0, executor=wrong_device())
    other = validate(g, seed=1, executor=wrong_device())
    worst = [(c.worst_got, c.worst_want) for c in (default.nodes[1].comparison, seeded.nodes[1].comparison)]
    assert worst[0] == worst[1]
    assert other.nodes[1].comparison.worst_want != worst[0][1]


def test_the_table_has_a_row_per_step_exit_and_per_output_and_says_where_it_failed() -> None:
    report = validate(affine(), {"x": X}, executor=wrong_device())
    lines = [line.split("  ") for line in report.table().split("\n")]
    cells = [[c.strip() for c in line if c.strip()] for line in lines]
    assert cells[0] == ["validation of 'affine' against the CPU reference: FAIL"]
    assert cells[1] == ["step", "builder", "tensor", "max abs", "max rel", "max ulp", "mismatches", "verdict"]
    assert cells[2] == ["scale", "reference.pointwise", "scale::out_0", "0", "0", "0", "0/6", "PASS"]
    # x * 3 + bias = 1 * 3 + 1, and the device's + 1; the largest ulp count is at a reference value of 2: 2**22
    assert cells[3] == ["shift", "plugin.wrong_shift", "y", "1", "0.5", "4.19e+06", "6/6", "FAIL"]
    assert cells[4] == ["(end to end)", "y", "1", "0.5", "4.19e+06", "6/6", "FAIL"]
    # after the table, a line per failing tensor: where it is worst and the tolerance it broke
    assert lines[5:] == [
        ["shift y: worst at (0, 0): got 5.0, want 4.0; tolerance atol 2.8e-45 rtol 5.96e-07"],
        ["(end to end) y: worst at (0, 0): got 5.0, want 4.0; tolerance atol 1.31e-08 rtol 1.31e-06"],
    ]


def test_to_json_carries_the_verdict_and_every_comparison() -> None:
    report = validate(affine(), {"x": X}, executor=wrong_device())
    text = report.to_json()
    assert text.startswith('{\n  "graph": "affine",\n  "passed": false,')  # indented by 2
    data = json.loads(text)
    assert data["graph"] == "affine" and data["passed"] is False
    assert [(n["node"], n["builder"], n["name"]) for n in data["nodes"]] == [
        ("scale", "reference.pointwise", "scale::out_0"),
        ("shift", "plugin.wrong_shift", "y"),
    ]
    assert data["nodes"][1]["max_abs_error"] == 1 and data["outputs"][0]["name"] == "y"
    assert report.builders == {"scale": "reference.pointwise", "shift": "plugin.wrong_shift"}


def test_got_receives_the_device_outputs() -> None:
    got: dict[str, np.ndarray] = {}
    validate(affine(), {"x": X}, executor=wrong_device(), got=got)
    assert list(got) == ["y"]
    np.testing.assert_array_equal(got["y"], X * 3 + np.array([[1.0, -2.0, 0.5]], np.float32) + 1)


def test_failures_are_the_failing_checks_and_keep_their_errors() -> None:
    report = validate(affine(), {"x": X}, executor=wrong_device())
    assert [c.node for c in report.failures] == ["shift"]
    (failing,) = report.failures
    assert failing.errors is not None and failing.errors.abs_error.tolist() == [[1.0] * 3] * 2
    assert report.nodes[0].errors is None  # a passing check keeps nothing


def test_checks_compare_by_their_verdicts_not_their_error_arrays() -> None:
    """Two runs of the same inputs give equal reports: the kept arrays are left out of equality and repr."""
    one = validate(affine(), {"x": X}, executor=wrong_device())
    two = validate(affine(), {"x": X}, executor=wrong_device())
    assert one.nodes[1].errors is not two.nodes[1].errors
    assert one.nodes == two.nodes
    assert "errors=" not in repr(one.nodes[1]) and "Errors(" not in repr(one.nodes[1])


def test_the_plain_table_right_aligns_numbers_and_left_aligns_text() -> None:
    lines = validate(affine(), {"x": X}, executor=wrong_device()).table().split("\n")[1:]
    header = lines[0]
    numbers = {"max abs", "max rel", "max ulp", "mismatches"}  # stated here, not read from the code under test
    for name in ("step", "builder", "tensor", *numbers, "verdict"):
        justify = "right" if name in numbers else "left"
        start = header.index(name)
        end = start + len(name)
        for line in lines[1:4]:  # the rows; the failure lines follow
            if justify == "right":  # every number ends where its header ends
                assert line[end - 1] != " " and (end == len(line) or line[end] == " "), (name, line)
            elif line[start:end].strip():  # text starts where its header starts
                assert line[start] != " " and (start == 0 or line[start - 1] == " "), (name, line)


def test_a_cell_is_cut_in_the_middle_and_a_huge_count_keeps_three_digits() -> None:
    from sigdnn.validation.table import fit, mismatches

    assert fit("abcdefghij", 10) == "abcdefghij"
    assert fit("abcdefghijk", 10) == "abcd…ghijk"
    assert fit("abcdefghijk", 9) == "abcd…hijk"
    assert mismatches(150000, 300000) == "150000/300000"
    assert mismatches(1500000, 3000000) == "1.5e+06/3e+06"
