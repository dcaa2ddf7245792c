"""Fake CPU plugin builders for the autotune tests (importable by a subprocess, too).

Two correct matmul builders of different (injected) speed, one that offers
two configurations, and one that is fastest but wrong: the tuner must pick
by the timer, never the wrong one, and remember the pick.
"""

from __future__ import annotations

import numpy as np

import sigdnn
from sigdnn.registry.contracts import NodePlan, PlanBuilder
from sigdnn.registry.registry import Registry

BINDS: list = []  # bound plans, in order (the tuner runs a plan through its bind when it has one)

# Seconds the injected timer reports per candidate label (a deterministic stand-in for the device).
SPEEDS = {
    "reference.matmul": 9e-3,
    "plugin.slow": 5e-3,
    "plugin.tiles[small]": 4e-3,
    "plugin.tiles[large]": 2e-3,
    "plugin.wrong": 1e-3,
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


def registry() -> Registry:
    r = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
    for cls in (Slow, Tiles, Wrong):
        r.register(cls)
    return r


def timer(label, run, synchronize) -> float:
    run()
    synchronize()
    return SPEEDS[label]


def refuse_to_time(label, run, synchronize) -> float:
    raise AssertionError(f"timed {label}: the choice should have come from the cache")


def graph(m: int = 24) -> sigdnn.Graph:
    g = sigdnn.Graph("mm", io_dtype="float32", compute_dtype="float32")
    g.matmul(g.tensor("a", (m, 16)), g.tensor("b", (16, 8)), name="mm").set_output(True).set_name("c")
    return g
