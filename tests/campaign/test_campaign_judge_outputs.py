"""A case with two outputs judged: the worst comparison is the failing one, not the one with the largest
error; the row's errors are the largest over every comparison; NaN mismatches count with the others."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar

import numpy as np
import pytest

import sigdnn
from sigdnn.campaign.cases import Case, graph_digest
from sigdnn.campaign.judge import FAIL, compute_reference, judge, max_ulps, shape_facts
from sigdnn.dtypes import round_to
from sigdnn.registry import DEFAULT_REGISTRY, NodePlan, PlanBuilder

SCALE = 2.0**100


class SkewPlan(NodePlan):
    """mul: the exact float32 product one ulp up (within the tolerance, yet an error of ~2**77);
    add: exact but element 0 off by 0.5 and element 1 NaN (a failure of error 0.5, one NaN mismatch)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def execute(self, buffers: Any, context: Any = None) -> None:
        a, b = (np.asarray(buffers[p]).astype(np.float64) for p in ("in_0", "in_1"))
        if self.mode == "mul":
            exact = round_to(a * b, sigdnn.DataType.FLOAT32)
            buffers["out_0"][...] = np.nextafter(exact, np.float32(np.inf))
            return
        y = round_to(a + b, sigdnn.DataType.FLOAT32)
        y[0] += np.float32(0.5)
        y[1] = np.nan
        buffers["out_0"][...] = y


class Skew(PlanBuilder):
    name: ClassVar[str] = "skew.pointwise"
    engine_id: ClassVar[int] = 30195
    library: ClassVar[str] = "skew"
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)

    def serves(self, key: Any) -> bool:
        return key.op == "pointwise" and key.trait("mode") in ("mul", "add")

    def build(self, node: Any, graph: Any, context: Any) -> NodePlan:
        return SkewPlan(node.op.mode)


@pytest.fixture
def skew() -> Iterator[None]:
    sigdnn.register(Skew, replace=True)
    yield
    DEFAULT_REGISTRY.unregister(Skew.engine_id)


def two_outputs() -> Case:
    g = sigdnn.Graph("two", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (4,))
    g.pointwise("mul", x, g.scalar("s", SCALE), name="big").set_output(True).set_name("big")
    g.pointwise("add", x, x, name="small").set_output(True).set_name("small")
    data = g.serialize()
    return Case("two-outputs", data, graph_digest(data), "two", 5, "reference", "skew.pointwise", None, None, "test")


def test_the_worst_comparison_is_the_failing_one_and_errors_are_the_largest(skew: None) -> None:
    case = two_outputs()
    reference = compute_reference(case.graph, case.seed)
    row = judge(case, reference)
    assert row["verdict"] == FAIL
    worst = row["worst"]
    assert worst["tensor"] == "small" and worst["index"] == [1]  # failing, though "big" is off by far more
    assert np.isnan(worst["got"]) and worst["want"] == float(reference.outputs["small"][1])  # a NaN outranks
    want = float(reference.outputs["small"][0])
    big = reference.outputs["big"].astype(np.float64)
    big_error = float(np.max(np.nextafter(big.astype(np.float32), np.float32(np.inf)).astype(np.float64) - big))
    assert big_error > 2.0**70
    assert row["max_abs_error"] == big_error  # the largest over every comparison, passing ones included
    assert row["max_rel_error"] == pytest.approx(max(0.5 / abs(want), float(np.max(big_error / np.abs(big)))),
                                                 rel=1e-6)  # fmt: skip
    assert row["max_ulp_error"] == pytest.approx(0.5 / float(np.spacing(np.float32(abs(want)))))
    # element 0 off and element 1 NaN, each in the step check and end to end: 2 + 2
    assert row["mismatches"] == 4


def test_an_output_with_no_finite_pair_does_not_end_the_ulp_count() -> None:
    g = sigdnn.Graph("two", io_dtype="float16")
    x = g.tensor("x", dims=(2,))
    g.pointwise("exp", x).set_output(True).set_name("first")
    g.pointwise("neg", x).set_output(True).set_name("second")
    assert [t.name for t in g.outputs] == ["first", "second"]
    want = {"first": np.array([np.inf, np.nan]), "second": np.array([1.0, 2.0])}
    got = {"first": np.array([np.inf, 1.0]), "second": np.array([1.0, 2.0 + 3 * 2**-9])}
    assert max_ulps(g, got, want) == 3.0


def test_a_graphs_keys_are_listed_once_each_in_node_order() -> None:
    g = sigdnn.Graph("three", io_dtype="float16")
    x = g.tensor("x", dims=(2,))
    for name, mode in [("first", "exp"), ("second", "neg"), ("third", "neg")]:
        g.pointwise(mode, x).set_output(True).set_name(name)
    facts = shape_facts(g)
    assert facts["key"] == "Pointwise[exp](f16->f16; f32); Pointwise[neg](f16->f16; f32)"
    assert facts["family"] == "pointwise[exp]+pointwise[neg]"
