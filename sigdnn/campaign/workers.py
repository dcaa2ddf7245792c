"""The work a campaign's Ray actors do, as a plain class (the runner makes it a Ray actor).

One actor per GPU (or per pair of CPUs on the reference backend) keeps its
executors, compiled kernels and its device for its whole life: Ray runs a
GPU *task* in a fresh process each time (``max_calls=1``), which would
recompile every kernel per case.
"""

from __future__ import annotations

import os
from typing import Any

from sigdnn.campaign.cases import Case
from sigdnn.campaign.judge import ReferenceResult, compute_reference, judge
from sigdnn.campaign.shrink import shrink_case
from sigdnn.campaign.spec import Spec
from sigdnn.graph.limits import Limits


class CaseWorker:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits

    def reference(self, graph: bytes, seed: int, spread: bool) -> ReferenceResult:
        """The reference of a graph and seed on this worker's truth (its GPU's, on a GPU campaign)."""
        return compute_reference(graph, seed, self.limits, spread=spread)

    def judge(self, case: Case, reference: ReferenceResult) -> dict[str, Any]:
        row = judge(case, reference, self.limits)
        row["worker"] = os.getpid()
        return row

    def shrink(self, case: Case, spec: Spec, budget: int) -> tuple[Any, Case, ReferenceResult]:
        shrunk, smallest = shrink_case(case, spec, budget)
        reference = compute_reference(smallest.graph, smallest.seed, self.limits, spread=smallest.tolerance is None)
        return shrunk, smallest, reference
