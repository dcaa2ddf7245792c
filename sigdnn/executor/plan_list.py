"""One ranked list of whole-graph plans, addressed by index (cuDNN-frontend's execution-plan list).

A prepared ExecutionPlan keeps, per step, every candidate (builder and
configuration) that accepted it, best first, and which one it built. Entry
0 runs every step's best-ranked candidate; each later entry switches one
step to another of its candidates (the other steps keep their best),
ordered by that candidate's rank in its step, then by step. So for a graph
of one step the list is exactly that step's ranked candidates.

``realize`` builds an entry: a builder may still decline there (it raises
NotSupported), which ``first_that_builds`` takes as the cue to go on to the
next entry, and a pinned caller as an error.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from sigdnn.errors import NotSupported, UsageError
from sigdnn.executor.autotune import Candidate
from sigdnn.executor.plan import ExecutionPlan, Step
from sigdnn.registry.contracts import BuildContext, RegionContext
from sigdnn.runtime.device import Device


@attrs.frozen
class PlanEntry:
    """One whole-graph plan: the candidate each step runs."""

    assignment: tuple[Candidate, ...]  # one per step of the prepared plan, in its order

    @property
    def name(self) -> str:
        """The steps' candidate labels joined with " + " (for one step: its label)."""
        return " + ".join(c.label for c in self.assignment)


def prepared(plan: ExecutionPlan) -> tuple[Candidate, ...]:
    """The candidate each step of ``plan`` built."""
    return tuple(candidates_of(step)[step.chosen] for step in plan.steps)


def candidates_of(step: Step) -> tuple[Candidate, ...]:
    """A step's ranked candidates; a step that had no choice (a view, a fallback) has its builder's default alone."""
    return step.candidates or (Candidate(step.builder),)


def plan_list(plan: ExecutionPlan) -> tuple[PlanEntry, ...]:
    """Every whole-graph plan the steps' candidates allow one switch at a time, best first (see the module)."""
    ranked = sorted(
        ((rank, s, c) for s, step in enumerate(plan.steps) for rank, c in enumerate(candidates_of(step))),
        key=lambda item: (item[0], item[1]),
    )
    best = tuple(candidates_of(step)[0] for step in plan.steps)
    entries = [PlanEntry(best)] if plan.steps else []
    entries += [PlanEntry((*best[:s], c, *best[s + 1 :])) for _, s, c in ranked if c != best[s]]
    return tuple(entries)


def realize(plan: ExecutionPlan, entry: PlanEntry, device: Device) -> ExecutionPlan:
    """``plan`` with each step running the entry's candidate; steps that already do keep their built plan.

    Raises NotSupported when a builder declines to build its step.
    """
    if len(entry.assignment) != len(plan.steps):
        raise UsageError(f"plan entry has {len(entry.assignment)} steps; the plan has {len(plan.steps)}")
    steps = []
    for step, now, wanted in zip(plan.steps, prepared(plan), entry.assignment):
        if wanted not in candidates_of(step):
            raise UsageError(f"step '{step.name}' has no candidate {wanted.label}")
        steps.append(step if now == wanted else _rebuild(plan, step, wanted, device))
    return attrs.evolve(plan, steps=tuple(steps))


def _rebuild(plan: ExecutionPlan, step: Step, candidate: Candidate, device: Device) -> Step:
    graph = plan.graph
    if step.region is None:
        context = BuildContext(step.key, device, graph, candidate.config)
        built = candidate.builder.build(step.node, graph, context)
    else:
        region_context = RegionContext(step.keys, device, graph, candidate.config)
        built = candidate.builder.build_region(step.region, graph, region_context)  # type: ignore[attr-defined]
    chosen = candidates_of(step).index(candidate)
    return attrs.evolve(step, builder=candidate.builder, plan=built, chosen=chosen, choice=f"pinned: {candidate.label}")


def first_that_builds(
    plan: ExecutionPlan, entries: Sequence[PlanEntry], start: int, device: Device
) -> tuple[int, ExecutionPlan, list[str]]:
    """The first entry from ``start`` on that builds: (its index, the plan, why each earlier one declined).

    NotSupported naming every decline when none builds.
    """
    if not 0 <= start < len(entries):
        raise UsageError(f"plan index {start} is out of range: the list has {len(entries)} plans")
    declines = []
    for index in range(start, len(entries)):
        try:
            return index, realize(plan, entries[index], device), declines
        except NotSupported as e:
            declines.append(f"plan {index} ({entries[index].name}): {e}")
    raise NotSupported(f"no plan from index {start} on builds: {'; '.join(declines)}")
