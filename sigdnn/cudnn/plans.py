"""A pygraph's execution plans: sigdnn's one ranked plan list behind cuDNN-frontend's plan calls.

``create_execution_plans`` prepares the graph on the handle's executor (one
ExecutionPlan: every step's candidates ranked by the router) and flattens it
into the list (``sigdnn.executor.plan_list``). ``build_plans`` walks the
list from the start and keeps the first plan that builds, a decline going
on to the next; ``select_plan(i)`` pins index i, and a pinned plan that
declines raises instead of running another. Heuristic modes (A, B,
FALLBACK) all mean the router's ranking: sigdnn has one.
"""

from __future__ import annotations

from typing import Any

from sigdnn.cudnn.enums import build_plan_policy
from sigdnn.errors import NoPlanError, NotSupported, SigdnnError, UsageError
from sigdnn.executor.executor import Executor
from sigdnn.executor.plan import ExecutionPlan
from sigdnn.executor.plan_list import PlanEntry, first_that_builds, plan_list, realize
from sigdnn.executor.router import Router
from sigdnn.graph.graph import Graph


class cudnnGraphNotSupportedError(SigdnnError):
    """No plan can run the graph, or the one pinned declined (cuDNN-frontend raises this name)."""


class Plans:
    """The ranked list of one planned graph, which entries were built, and which one runs."""

    def __init__(self, executor: Executor, graph: Graph, router: Router | None) -> None:
        self.executor = executor
        self.router = router
        try:
            self.prepared: ExecutionPlan = executor.prepare(graph, router=router)
        except NoPlanError as e:
            raise cudnnGraphNotSupportedError(f"create_execution_plans: {e}") from None
        self.entries: list[PlanEntry] = list(plan_list(self.prepared))
        self.built: dict[int, ExecutionPlan] = {}
        self.pinned: int | None = None
        self.selected: int | None = None

    def index(self, i: Any, call: str) -> int:
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(self.entries):
            raise UsageError(f"{call}({i!r}): the plan list has {len(self.entries)} plans (indices 0..)")
        return i

    def deselect(self, names: list[str]) -> None:
        """Drop the entries whose name is listed (cuDNN's deselect_engines), before any is built."""
        self.entries = [e for e in self.entries if e.name not in set(names)]

    def pin(self, i: int) -> None:
        self.pinned = self.index(i, "select_plan")

    def build_at(self, i: int) -> ExecutionPlan:
        """Build entry i (once); cudnnGraphNotSupportedError when its builder declines."""
        i = self.index(i, "build_plan_at_index")
        if i not in self.built:
            try:
                self.built[i] = realize(self.prepared, self.entries[i], self.executor.device)
            except NotSupported as e:
                raise cudnnGraphNotSupportedError(f"plan {i} ({self.entries[i].name}) declined: {e}") from None
        return self.built[i]

    def build(self, policy: build_plan_policy) -> None:
        """Build the pinned entry, or the first from 0 that builds (ALL: every entry that builds)."""
        if self.pinned is not None:
            self.build_at(self.pinned)
            self.selected = self.pinned
            return
        if policy is build_plan_policy.ALL:
            declines = []
            for i in range(len(self.entries)):
                try:
                    self.build_at(i)
                except cudnnGraphNotSupportedError as e:
                    declines.append(str(e))
            if not self.built:
                raise cudnnGraphNotSupportedError(f"build_plans: no plan builds: {'; '.join(declines)}")
            self.selected = min(self.built)
            return
        try:
            index, plan, _ = first_that_builds(self.prepared, self.entries, 0, self.executor.device)
        except NotSupported as e:
            raise cudnnGraphNotSupportedError(f"build_plans: {e}") from None
        except UsageError:
            raise cudnnGraphNotSupportedError("build_plans: the plan list is empty") from None
        self.built[index] = plan
        self.selected = index

    def realized(self, graph: Graph, i: int) -> ExecutionPlan:
        """Entry i's plan for ``graph``, a copy of the planned graph whose op attributes differ (values given at
        execute): prepared by the same executor, each step running the entry's candidate."""
        try:
            return realize(self.executor.prepare(graph, router=self.router), self.entries[i], self.executor.device)
        except NotSupported as e:
            raise cudnnGraphNotSupportedError(f"plan {i} ({self.entries[i].name}) declined: {e}") from None

    def running(self, call: str) -> ExecutionPlan:
        if self.selected is None:
            raise UsageError(f"{call}: build_plans() (or build_plan_at_index) has not built a plan yet")
        return self.built[self.selected]
