"""validate()'s accumulation bounds: where a GEMM's sum|terms| bound reaches, and where the normwise one applies.

A float32 GEMM is off the float64 reference by its accumulation error, K *
eps * sum|terms| at worst: every check downstream of it that compares
values carrying that error (a fused step's exit, a graph output) needs the
bound, or a correct kernel fails.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest
from test_validate import Float32MatmulBuilder, SkewedTanhBuilder, device

import sigdnn
from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.registry import Dataflow, FusionBuilder, Region, RegionContext, RegionPlan, Registry, make_region
from sigdnn.validation import compare, validate
from sigdnn.validation.checks import NodeCheck, ValidationReport

K = 64


def float32_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Sequential float32 accumulation over K, as a simple GPU kernel would do it."""
    return np.add.accumulate(a[:, :, None] * b[None, :, :], axis=1, dtype=np.float32)[:, -1, :]


class TwoMatmulsAndAdd(RegionPlan):
    def __init__(self, graph: sigdnn.Graph) -> None:
        n = {node.name: node.op for node in graph.nodes}
        self.mm1, self.mm2, self.out = n["mm1"], n["mm2"], n["sum"].outputs()["out_0"]

    def execute(self, buffers: Mapping[Any, Any], context: Any) -> None:
        c1 = float32_matmul(buffers[self.mm1.a], buffers[self.mm1.b])
        c2 = float32_matmul(buffers[self.mm2.a], buffers[self.mm2.b])
        buffers[self.out][...] = c1 + c2


class FuseAll(FusionBuilder):
    name: ClassVar[str] = "plugin.fuse_all"
    engine_id: ClassVar[int] = 31400
    library: ClassVar[str] = "plugin"

    def claim(self, graph: sigdnn.Graph, order: list[int], device: Any) -> list[Region]:
        return [make_region(Dataflow(graph, order), list(order))]

    def build_region(self, region: Region, graph: sigdnn.Graph, context: RegionContext) -> RegionPlan:
        return TwoMatmulsAndAdd(graph)


def graph() -> sigdnn.Graph:
    g = sigdnn.Graph("two_mm", io_dtype="float32", compute_dtype="float32")
    c1 = g.matmul(g.tensor("a1", (4, K)), g.tensor("b1", (K, 4)), name="mm1")
    c2 = g.matmul(g.tensor("a2", (4, K)), g.tensor("b2", (K, 4)), name="mm2")
    g.pointwise("add", c1, c2, name="sum").set_output(True).set_name("y")
    return g


def cancelling() -> np.ndarray:
    """Rows 2**20, 0.3 (62 times), -2**20: float32 accumulation loses ~3 of the true 18.6."""
    a = np.full((4, K), 0.3, np.float32)
    a[:, 0], a[:, -1] = 2.0**20, -(2.0**20)
    return a


@pytest.mark.parametrize("lossy", ["mm1", "mm2"])
def test_each_matmul_bound_reaches_the_fused_exit(lossy: str) -> None:
    registry = Registry(entry_point_group=None)
    registry.register(FuseAll())
    ones = np.ones((K, 4), np.float32)
    small = np.full((4, K), 0.01, np.float32)
    data = {"a1": small, "a2": small, "b1": ones, "b2": ones, f"a{lossy[-1]}": cancelling()}
    report = validate(graph(), data, executor=sigdnn.Executor(registry=registry))
    (check,) = report.nodes
    assert check.node == "region(mm1..sum)"
    assert check.comparison.max_abs_error > 1  # float32 accumulation lost units...
    assert report.passed, report.table()  # ...within that matmul's K * eps * sum|terms| bound


class OffsetSoftmax(sigdnn.registry.NodePlan):
    """softmax, then ``offset`` added to every entry: an error the size of the largest entry's rounding."""

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def execute(self, buffers: Mapping[Any, Any], context: Any = None) -> None:
        x = buffers["x"].astype(np.float64)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        buffers["y"][...] = e / e.sum(axis=-1, keepdims=True) + self.offset


class OffsetSoftmaxBuilder(sigdnn.registry.PlanBuilder):
    name, engine_id, library, ops, priority = "plugin.offset_softmax", 31401, "plugin", ("softmax",), 10

    def __init__(self, offset: float) -> None:
        self.offset = offset

    def build(self, node: Any, graph: Any, context: Any) -> sigdnn.registry.NodePlan:
        return OffsetSoftmax(self.offset)


@pytest.mark.parametrize(("offset", "passes"), [(1e-9, True), (1e-6, False)])
def test_a_softmax_of_two_is_judged_normwise(offset: float, passes: bool) -> None:
    """Over two entries, [1 - 4.5e-5, 4.5e-5]: an absolute error far below the larger entry's ulp passes though it
    is 2e-5 of the smaller one (the reduction bound scales with max |y|); one of 1e-6 (8 ulps of 1) does not."""
    g = sigdnn.Graph("sm", io_dtype="float32", compute_dtype="float32")
    y, _ = g.softmax(g.tensor("x", (3, 2)), name="sm")
    y.set_output(True).set_name("y")
    x = np.array([[0.0, -10.0], [-10.0, 0.0], [3.0, -7.0]], np.float32)
    registry = Registry(entry_point_group=None)
    registry.register(OffsetSoftmaxBuilder(offset))
    report = validate(g, {"x": x}, executor=sigdnn.Executor(registry=registry))
    assert report.nodes[0].comparison.passed == passes, report.table()


def test_a_nan_row_does_not_widen_the_normwise_bound() -> None:
    """NaN and inf entries do not count in the scale (max finite |y|, here 0.5): 8e-7 off on 0.5 fails,
    as it must with a bound of 0.5 * (4 + 1 ulps of float32) + 4 sqrt(2) * 0.5 ulps, about 6.4e-7."""
    g = sigdnn.Graph("sm", io_dtype="float32", compute_dtype="float32")
    y, _ = g.softmax(g.tensor("x", (2, 2)), name="sm")
    y.set_output(True).set_name("y")
    x = np.array([[0.0, 0.0], [np.inf, 0.0]], np.float32)  # rows [0.5, 0.5] and [NaN, NaN]
    registry = Registry(entry_point_group=None)
    registry.register(OffsetSoftmaxBuilder(8e-7))
    with np.errstate(invalid="ignore"):
        report = validate(g, {"x": x}, executor=sigdnn.Executor(registry=registry))
    comparison = report.nodes[0].comparison
    assert comparison.nan_inf_mismatches == 0 and comparison.mismatches == 2, report.table()


def test_a_cancelling_output_carries_the_errors_before_it() -> None:
    """tanh(3) one float32 ulp high passes at its node; 1 - tanh(3) = 0.00495 cancels, so that ulp is 1.2e-5 of
    the output. End to end, tanh's allowed error is carried to the output at tanh's own size: it passes."""
    g = sigdnn.Graph("two_outputs", io_dtype="float32", compute_dtype="float32")
    t = g.pointwise("tanh_fwd", g.tensor("x", (1,)), name="tanh")
    t.set_output(True).set_name("t")
    g.pointwise("sub", g.scalar("one", 1.0), t, name="gap").set_output(True).set_name("gap")
    registry = Registry(entry_point_group=None)
    registry.register(SkewedTanhBuilder(ulps=1))
    report = validate(g, {"x": np.array([3.0], np.float32)}, executor=sigdnn.Executor(registry=registry))
    gap = report.outputs[1]
    assert gap.name == "gap" and gap.max_rel_error > 1e-5
    assert report.passed, report.table()


def test_every_output_must_pass() -> None:
    """Every step passing and one of two outputs off end to end: the report fails."""
    good = compare("t", np.array([1.0]), np.array([1.0]), Tolerance(0.0, 1e-6))
    off = compare("gap", np.array([1.1]), np.array([1.0]), Tolerance(0.0, 1e-6))
    step = NodeCheck("tanh", "plugin", good)
    assert ValidationReport("g", (step,), (good, good)).passed
    assert not ValidationReport("g", (step,), (good, off)).passed


@pytest.mark.parametrize("after", ["relu_fwd", "transpose", "slice", "concatenate"])
def test_a_gemm_bound_reaches_outputs_in_later_steps(after: str) -> None:
    """A float32 matmul (K = 4096) then, as its own step, an activation or a data movement: the output is off
    by the matmul's accumulation error, and its end-to-end check must carry the matmul's bound to pass."""
    g = sigdnn.Graph("mm_then", io_dtype="float32", compute_dtype="float32")
    c = g.matmul(g.tensor("a", (16, 4096)), g.tensor("b", (4096, 16)), name="mm")
    if after == "relu_fwd":
        y = g.pointwise("relu_fwd", c, name="after")
    elif after == "transpose":
        y = g.transpose(c, (1, 0), name="after")
    elif after == "slice":
        y = g.slice(c, [slice(2, 16), slice(None, None, 2)], name="after")
    else:
        y = g.concatenate([g.tensor("z", (3, 16)), c], axis=0, name="after")
    y.set_output(True).set_name("y")
    report = validate(g, seed=4, executor=device(Float32MatmulBuilder()))
    assert [c.node for c in report.nodes] == ["mm", "after"]
    assert report.outputs[0].max_abs_error > 1e-5  # float32 accumulation really shows at the output
    assert report.passed, report.table()


def test_a_step_after_a_gemm_is_judged_without_the_gemm_bound() -> None:
    """The step check feeds the device's own matmul result to the tanh: 8 float32 ulps off fail there,
    though the end-to-end check, which carries the matmul's bound, lets them through."""
    g = sigdnn.Graph("mm_tanh", io_dtype="float32", compute_dtype="float32")
    c = g.matmul(g.tensor("a", (16, 256)), g.tensor("b", (256, 16)), name="mm")
    g.pointwise("tanh_fwd", g.pointwise("mul", c, g.scalar("s", 0.01), name="scale"), name="tanh").set_output(True)
    report = validate(g, seed=5, executor=device(Float32MatmulBuilder(), SkewedTanhBuilder(ulps=8)))
    verdicts = {c.node: c.comparison.passed for c in report.nodes}
    assert verdicts == {"mm": True, "scale": True, "tanh": False}
    assert all(c.passed for c in report.outputs), report.table()


def test_a_one_term_softmax_gets_no_normwise_bound_end_to_end() -> None:
    """softmax over an axis of one (y = 1 exactly) beside a matmul with K = 64: y's end-to-end bound is the
    chain's rtol (11 float32 ulps over the graph) plus y's own carried error, about 2e-6; the matmul's
    accumulation factor (4 * 8 eps = 3.8e-6) must not be scaled by max|y| into it, so 3e-6 off fails."""
    g = sigdnn.Graph("apart", io_dtype="float32", compute_dtype="float32")
    y, _ = g.softmax(g.tensor("x", (3, 1)), name="sm")
    y.set_output(True).set_name("y")
    g.matmul(g.tensor("a", (2, 64)), g.tensor("b", (64, 2)), name="mm").set_output(True).set_name("c")
    registry = Registry(entry_point_group=None)
    registry.register(OffsetSoftmaxBuilder(3e-6))
    report = validate(g, seed=2, executor=sigdnn.Executor(registry=registry))
    verdicts = {c.name: c.passed for c in report.outputs}
    assert verdicts == {"y": False, "c": True}, report.table()
