"""Matmul builders for the plan-list tests: each marks its result with its own offset, so a test sees which ran.

``plan.first`` ranks highest and offers two configurations, the first of
which declines when built; ``plan.checker`` declines every node at check
(so it is never listed); ``plan.second`` builds.
"""

from __future__ import annotations

import numpy as np

from sigdnn.errors import NotSupported
from sigdnn.executor.autotune import Candidate  # noqa: F401 (the tests build entries with it)
from sigdnn.executor.executor import Executor
from sigdnn.registry.contracts import NodePlan, PlanBuilder
from sigdnn.registry.registry import Registry

OFFSETS = {"plan.first[b]": 1.0, "plan.second": 2.0}
BUILDS: list[str] = []  # every build, by builder name and configuration, in order


class _Plan(NodePlan):
    def __init__(self, offset: float, workspace: int) -> None:
        self.offset = offset
        self.workspace_bytes = workspace

    def execute(self, buffers, context) -> None:
        buffers["c"][...] = np.matmul(buffers["a"], buffers["b"]) + self.offset


class First(PlanBuilder):
    name, engine_id, library, ops, priority = "plan.first", 30101, "plan", ("matmul",), 5

    def configs(self, nodes, graph, device) -> list[str]:
        return ["a", "b"]

    def build(self, node, graph, context) -> NodePlan:
        BUILDS.append(f"plan.first[{context.config}]")
        if context.config == "a":
            raise NotSupported("configuration a needs a wider tile than this node has")
        return _Plan(OFFSETS["plan.first[b]"], 64)


class Checker(PlanBuilder):
    name, engine_id, library, ops, priority = "plan.checker", 30102, "plan", ("matmul",), 4

    def check(self, node, graph, device) -> None:
        raise NotSupported("declines every node")

    def build(self, node, graph, context) -> NodePlan:
        raise AssertionError("a builder whose check declined is never built")


class Second(PlanBuilder):
    name, engine_id, library, ops, priority = "plan.second", 30103, "plan", ("matmul",), 3

    def build(self, node, graph, context) -> NodePlan:
        BUILDS.append("plan.second")
        return _Plan(OFFSETS["plan.second"], 128)


def registry() -> Registry:
    found = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
    for builder in (First, Checker, Second):
        found.register(builder)
    return found


def executor(**kw) -> Executor:
    return Executor("reference", registry=registry(), **kw)
