"""Regions: a fusion builder claims connected, convex node sets that run as one step.

The fusion builder here runs a pointwise region on the reference, one node
after another on private temporaries: internal tensors must never be
allocated by the executor nor be observable, and results must equal the
node-by-node plan bit for bit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.registry import (
    BuildContext,
    Dataflow,
    FusionBuilder,
    Region,
    RegionContext,
    RegionPlan,
    Registry,
    grow_regions,
    make_region,
)
from sigdnn.runtime import Device, ExecutionContext


class ReferenceRegion(RegionPlan):
    """Runs the region's nodes with the reference's own node plans, temporaries kept private."""

    def __init__(self, region: Region, graph: sigdnn.Graph, keys: tuple[Any, ...], skew: float) -> None:
        reference = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
        self.graph, self.region, self.skew = graph, region, skew
        self.plans = []
        for i, key in zip(region.nodes, keys):
            node = graph.nodes[i]
            builder = reference.serving(key, "cpu")[0]
            self.plans.append((node, builder.build(node, graph, BuildContext(key, Device(), graph))))

    def execute(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> None:
        values = dict(buffers)
        for node, plan in self.plans:
            ports = {}
            for port, uid in node.op.ports().items():
                if uid not in values:
                    t = self.graph.tensors[uid]
                    values[uid] = np.empty(t.dims, self.graph.dtype_of(t).numpy)
                ports[port] = values[uid]
            plan.execute(ports, context)
        for uid in self.region.exits:
            values[uid][...] += self.skew


class ChainFusion(FusionBuilder):
    name: ClassVar[str] = "plugin.chain_fusion"
    engine_id: ClassVar[int] = 30800
    library: ClassVar[str] = "plugin"

    def __init__(self, skew: float = 0.0) -> None:
        self.skew = skew

    def claim(self, graph: sigdnn.Graph, order: list[int], device: Device) -> list[Region]:
        flow = Dataflow(graph, order)
        groups = grow_regions(flow, order, lambda i: graph.nodes[i].kind == "pointwise")
        return [make_region(flow, g) for g in groups if len(g) > 1]

    def build_region(self, region: Region, graph: sigdnn.Graph, context: RegionContext) -> RegionPlan:
        return ReferenceRegion(region, graph, context.keys, self.skew)


def fusing(skew: float = 0.0) -> sigdnn.Executor:
    registry = Registry(entry_point_group=None)
    registry.register(ChainFusion(skew))
    return sigdnn.Executor(registry=registry)


def block() -> sigdnn.Graph:
    """matmul -> (bias, gelu, scale) chain -> matmul, with a residual add reading the first chain's input."""
    g = sigdnn.Graph("block", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x, w1, w2 = g.tensor("x", (8, 16)), g.tensor("w1", (16, 32)), g.tensor("w2", (32, 16))
    b = g.tensor("b", (1, 32))
    h = g.matmul(x, w1, name="mm1")
    h = g.pointwise("add", h, b, name="bias")
    h = g.pointwise("gelu_fwd", h, name="gelu")
    h = g.pointwise("mul", h, h, name="square")
    y = g.matmul(h, w2, name="mm2")
    y = g.pointwise("add", y, x, name="residual")
    g.pointwise("tanh_fwd", y, name="out").set_output(True).set_name("y")
    return g


def inputs(g: sigdnn.Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {t.name: rng.uniform(-1, 1, t.dims).astype(np.float32) for t in g.inputs}


def test_pointwise_chains_become_region_steps() -> None:
    plan = fusing().prepare(block())
    assert [s.name for s in plan.steps] == ["mm1", "region(bias..square)", "mm2", "region(residual..out)"]
    region = plan.steps[1]
    assert [n.name for n in region.nodes] == ["bias", "gelu", "square"]
    assert "region of 3 nodes" in plan.describe() and "- gelu" in plan.describe()


def test_internal_tensors_are_neither_allocated_nor_observable() -> None:
    g = block()
    plan = fusing().prepare(g)
    internal = {g.tensors[u].name for s in plan.regions for u in s.region.internal}
    assert internal == {"bias::out_0", "gelu::out_0", "residual::out_0"}
    allocated = {g.tensors[u].name for u in plan.memory.offsets}
    assert allocated == {"mm1::c", "square::out_0", "mm2::c"}
    seen: dict[str, np.ndarray] = {}
    fusing().execute(plan, inputs(g), capture=seen)
    assert not internal & set(seen)
    assert set(seen) == allocated | {"y"}


def test_regions_compute_what_the_nodes_compute() -> None:
    g = block()
    fused = fusing().run(g, inputs(g))["y"]
    plain = sigdnn.Executor().run(g, inputs(g))["y"]
    np.testing.assert_array_equal(fused, plain)


def test_a_fused_chain_of_100_nodes_allocates_nothing() -> None:
    g = sigdnn.Graph("chain", io_dtype="float32", intermediate_dtype="float32")
    t = g.tensor("x", (1000,))
    for i in range(100):
        t = g.pointwise("add" if i % 2 else "mul", t, t, name=f"n{i}")
    t.set_output(True)
    plan = fusing().prepare(g)
    assert len(plan.steps) == 1 and plan.memory.peak_bytes == 0


def test_validation_judges_a_region_as_one_step() -> None:
    g = block()
    good = sigdnn.validate(g, inputs(g), executor=fusing())
    assert good.passed
    assert {c.node for c in good.nodes} >= {"region(bias..square)", "region(residual..out)"}
    bad = sigdnn.validate(g, inputs(g), executor=fusing(skew=1e-3))
    assert not bad.passed
    failing = {c.node for c in bad.nodes if not c.comparison.passed}
    assert failing == {"region(bias..square)", "region(residual..out)"}


def test_pinned_nodes_stay_out_of_regions() -> None:
    registry = Registry(entry_point_group=None)
    registry.register(ChainFusion())
    plan = sigdnn.Executor(registry=registry, pins={"gelu": "reference.pointwise"}).prepare(block())
    assert "gelu" in [s.name for s in plan.steps]
    assert not any(s.region is not None and "gelu" in [n.name for n in s.nodes] for s in plan.steps)


def test_make_region_refuses_sets_that_are_not_connected_or_not_convex() -> None:
    g = block()
    order = list(range(len(g.nodes)))
    flow = Dataflow(g, order)
    index = {n.name: i for i, n in enumerate(g.nodes)}
    with pytest.raises(GraphError, match="not connected"):
        make_region(flow, [index["bias"], index["out"]])
    diamond = sigdnn.Graph("diamond", io_dtype="float32")
    a = diamond.pointwise("exp", diamond.tensor("x", (4,)), name="a")
    b = diamond.pointwise("neg", a, name="b")
    diamond.pointwise("add", a, b, name="c").set_output(True)
    with pytest.raises(GraphError, match="not convex"):  # a -> c directly, and a -> b -> c outside
        make_region(Dataflow(diamond, [0, 1, 2]), [0, 2])
    assert make_region(Dataflow(diamond, [0, 1, 2]), [0, 1, 2]).internal == (a.uid, b.uid)


def test_the_same_shape_of_computation_has_the_same_pattern_key() -> None:
    def two_chains() -> sigdnn.Graph:
        g = sigdnn.Graph("twice", io_dtype="float32")
        for name in ("p", "q"):
            t = g.pointwise("exp", g.tensor(name, (4,)), name=f"{name}_exp")
            g.pointwise("neg", t, name=f"{name}_neg").set_output(True)
        return g

    plan = fusing().prepare(two_chains())
    first, second = (s.region for s in plan.regions)
    assert first.pattern == second.pattern and first.nodes != second.nodes
