"""Router: the policy that ranks what may run a step, as an object one can subclass and pass around.

The executor asks its router twice per step: ``rank`` orders the builders
whose ``check`` may accept a node (the default is the heuristics module,
``sigdnn.registry.ranking``: the seam a cost model replaces), and ``choose``
orders the step's candidates (each builder's configurations) once they are
known (the default keeps that order). ``autotune.Tuner`` is one router: it
puts a measured or remembered winner first.

Where a router comes from, first match wins: ``Executor.prepare(graph,
router=...)`` (one graph), ``Executor(router=...)`` (one executor),
``set_default_router(...)`` (the process), else the executor's own tuner.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.registry import ranking
from sigdnn.registry.contracts import PlanBuilder, StepPlan
from sigdnn.runtime.device import Device

if TYPE_CHECKING:
    from sigdnn.executor.autotune import Candidate, Choice, StepShape


class Router:
    """Ranks a step's builders and orders its candidates, best first. Subclass to change either."""

    def rank(self, builders: Sequence[PlanBuilder], node: Node, graph: Graph) -> list[PlanBuilder]:
        """Builders that serve ``node``, best first (default: the heuristics module's order)."""
        return ranking.rank(builders, node, graph)

    def choose(
        self,
        candidates: Sequence[Candidate],
        graph: Graph,
        shape: StepShape,
        device: Device,
        memory: Any,
        build: Callable[[Candidate], StepPlan],
    ) -> tuple[list[Candidate], Choice | None]:
        """``candidates`` reordered, best first, and how the first was picked (None: by rank alone)."""
        return list(candidates), None


_default: Router | None = None
_lock = threading.Lock()


def set_default_router(router: Router | None) -> Router | None:
    """Make ``router`` the process-wide default (None: back to each executor's tuner); returns the previous one."""
    global _default
    with _lock:
        previous, _default = _default, router
    return previous


def default_router() -> Router | None:
    """The process-wide router set by ``set_default_router``, or None."""
    return _default
