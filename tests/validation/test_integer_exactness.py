"""Integer outputs are compared as integers (#32): through float64, 2**60 + 1 equalled 2**60, so an
off-by-one int64 plugin FAILed near 0 and PASSed near 2**60."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.compare import compare, integer_abs_error
from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.registry.contracts import NodePlan, PlanBuilder
from sigdnn.registry.registry import Registry
from sigdnn.validation import validate

EXACT = Tolerance(0.0, 0.0, exact=True)
INT64 = np.iinfo(np.int64)
UINT64 = np.iinfo(np.uint64)


@pytest.mark.parametrize("base", [0, 2**53, 2**60, INT64.max - 1, INT64.min])
def test_an_off_by_one_fails_at_every_magnitude(base: int) -> None:
    want = np.array([base, base], np.int64)
    got = want + np.array([0, 1], np.int64)
    c = compare("y", got, want, EXACT)
    assert not c.passed and c.mismatches == 1 and c.max_abs_error == 1.0 and c.worst_index == (1,)
    assert compare("y", want.copy(), want, EXACT).passed


@pytest.mark.parametrize(
    ("got", "want", "difference"),
    [
        (np.array([INT64.max], np.int64), np.array([INT64.min], np.int64), 2**64 - 1),
        (np.array([UINT64.max], np.uint64), np.array([0], np.uint64), 2**64 - 1),
        (np.array([UINT64.max], np.uint64), np.array([-1], np.int64), 2**64),
        (np.array([True, False]), np.array([False, False]), 1),
        (np.array([-128], np.int8), np.array([127], np.int8), 255),
    ],
)
def test_the_exact_difference_of_the_extremes(got: np.ndarray, want: np.ndarray, difference: int) -> None:
    found = integer_abs_error(got, want)
    assert found is not None and found.max() == float(difference)
    assert integer_abs_error(np.array([1.5]), want[:1]) is None  # a float side: the float path


class OffByOne(NodePlan):
    def execute(self, buffers: Any, context: Any = None) -> None:
        buffers["out_0"][...] = buffers["in_0"] + buffers["in_1"] + 1


class OffByOneAdd(PlanBuilder):
    name, engine_id, library, ops, priority = "plugin.off_by_one64", 30503, "plugin", ("pointwise",), 10

    def serves(self, key: Any) -> bool:
        return key.trait("mode") == "add"

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        return OffByOne()


def test_an_off_by_one_int64_plugin_fails_validation_near_two_to_the_sixty() -> None:
    g = sigdnn.Graph("ints64", io_dtype="int64", compute_dtype="int64")
    g.pointwise("add", g.tensor("a", (2,)), g.tensor("b", (2,)), name="sum").set_output(True).set_name("y")
    registry = Registry()
    registry.register(OffByOneAdd())
    inputs = {"a": np.array([2**60, 3], np.int64), "b": np.array([0, 4], np.int64)}
    report = validate(g, inputs, executor=sigdnn.Executor(registry=registry))
    assert not report.passed
    (node,) = report.nodes
    assert node.comparison.mismatches == 2
