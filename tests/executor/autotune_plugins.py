"""Fake CPU plugin builders for the autotune tests (importable by a subprocess, too).

Two correct matmul builders of different (injected) speed, one that offers
two configurations, and one that is fastest but wrong: the tuner must pick
by the timer, never the wrong one, and remember the pick.
"""

from __future__ import annotations

import numpy as np

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.registry.contracts import FusionBuilder, NodePlan, PlanBuilder, RegionPlan
from sigdnn.registry.regions import Dataflow, make_region
from sigdnn.registry.registry import Registry

BINDS: list = []  # bound plans, in order (the tuner runs a plan through its bind when it has one)

# Seconds the injected timer reports per candidate label (a deterministic stand-in for the device).
SPEEDS = {
    "reference.matmul": 9e-3,
    "plugin.slow": 5e-3,
    "plugin.tiles[small]": 4e-3,
    "plugin.tiles[large]": 2e-3,
    "plugin.wrong": 1e-3,
    "fuse.slow[x]": 3e-3,
    "fuse.slow[y]": 6e-3,
    "fuse.fast": 2e-3,
}


class _Plan(NodePlan):
    def __init__(self, error: float) -> None:
        self.error = error

    def execute(self, buffers, context) -> None:
        result = np.matmul(buffers["a"].astype(np.float64), buffers["b"].astype(np.float64)) + self.error
        buffers["c"][...] = result.astype(buffers["c"].dtype)


class _BoundPlan(_Plan):
    """A plan with the executor's fast path: ``bind`` returns the launch the tuner times."""

    def bind(self, buffers, context):
        BINDS.append(self)
        return lambda: self.execute(buffers, context)


class _Matmul(PlanBuilder):
    library = "plugin"
    device = "cpu"
    ops = ("matmul",)
    error = 0.0

    def build(self, node, graph, context) -> NodePlan:
        self.built = [*getattr(self, "built", []), context.config]
        return _Plan(self.error)


class Slow(_Matmul):
    name = "plugin.slow"
    engine_id = 30001


class Tiles(_Matmul):
    name = "plugin.tiles"
    engine_id = 30002

    def build(self, node, graph, context) -> NodePlan:
        super().build(node, graph, context)
        self.plan = _BoundPlan(self.error)
        return self.plan

    def configs(self, nodes, graph, device):
        return ["small", "large"]


class Wrong(_Matmul):
    name = "plugin.wrong"
    engine_id = 30003
    error = 0.5  # far outside any matmul tolerance


class _ReluRegionPlan(RegionPlan):
    def __init__(self, a: int, b: int, out: int) -> None:
        self.uids = (a, b, out)

    def execute(self, buffers, context) -> None:
        a, b, out = (buffers[u] for u in self.uids)
        out[...] = np.maximum(np.matmul(a.astype(np.float64), b.astype(np.float64)), 0).astype(out.dtype)


class _Fuse(FusionBuilder):
    """Claims matmul -> relu; runs it as one step."""

    library = "plugin"
    device = "cpu"

    def claim(self, graph, order, device):
        flow = Dataflow(graph, order)
        found = []
        for i in order:
            if isinstance(graph.nodes[i].op, Matmul):
                (j,) = flow.readers[graph.nodes[i].op.c]
                found.append(make_region(flow, [i, j]))
        return found

    def build_region(self, region, graph, context):
        assert context.keys == region.pattern[0]  # each node's key, in order
        mm, relu = region.node_list(graph)
        return _ReluRegionPlan(mm.op.a, mm.op.b, relu.op.out_0)


class FuseSlow(_Fuse):
    name = "fuse.slow"
    engine_id = 30010

    def configs(self, nodes, graph, device):
        return ["x", "y"]


class FuseFast(_Fuse):
    name = "fuse.fast"
    engine_id = 30011


class FuseDeclines(_Fuse):
    name = "fuse.declines"
    engine_id = 30009  # ranked first: the candidates after a decline must still be measured

    def build_region(self, region, graph, context):
        raise NotSupported("not this region")


def registry(*fusion: type) -> Registry:
    r = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
    for cls in (Slow, Tiles, Wrong, *fusion):
        r.register(cls)
    return r


def timer(label, run, synchronize) -> float:
    run()
    synchronize()
    return SPEEDS[label]


def refuse_to_time(label, run, synchronize) -> float:
    raise AssertionError(f"timed {label}: the choice should have come from the cache")


def graph(m: int = 24, relu: bool = False) -> sigdnn.Graph:
    g = sigdnn.Graph("mm", io_dtype="float32", compute_dtype="float32")
    c = g.matmul(g.tensor("a", (m, 16)), g.tensor("b", (16, 8)), name="mm")
    if relu:
        c = g.pointwise("relu_fwd", c, name="relu")
    c.set_output(True).set_name("c")
    return g
