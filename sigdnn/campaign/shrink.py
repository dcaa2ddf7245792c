"""Shrinking: from a failing generated case, the smallest shape that still fails.

Dim by dim, the smallest value that keeps the case failing (trying values
in increasing order, so the first failure found is that dim's minimum with
the others fixed), repeated until a full pass changes nothing: the result
is a shape where no single dim can shrink further. Small dims are tried
exhaustively; a dim above ``EXHAUSTIVE`` tries the small values and then
halvings, so a 4096-wide case costs a few dozen runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from sigdnn.campaign.cases import Case, make_case
from sigdnn.campaign.judge import FAIL, compute_reference, judge
from sigdnn.campaign.spec import Spec
from sigdnn.errors import SigdnnError

EXHAUSTIVE = 64
DEFAULT_BUDGET = 200  # runs per case


@attrs.frozen
class Shrunk:
    shape: tuple[int, ...]
    tries: int
    exhausted: bool  # the budget ran out before a pass changed nothing


def candidates(value: int) -> list[int]:
    """Smaller values for one dim, in increasing order."""
    if value <= EXHAUSTIVE:
        return list(range(1, value))
    halvings = []
    v = value // 2
    while v > EXHAUSTIVE:
        halvings.append(v)
        v //= 2
    return [*range(1, EXHAUSTIVE + 1), *reversed(halvings)]


def smallest_failing(
    shape: tuple[int, ...], fails: Callable[[tuple[int, ...]], bool], budget: int = DEFAULT_BUDGET
) -> Shrunk:
    """The smallest shape below ``shape`` (which fails) that still fails, one dim at a time."""
    best, tries = tuple(shape), 0
    changed = True
    while changed:
        changed = False
        for axis in range(len(best)):
            for value in candidates(best[axis]):
                if tries == budget:
                    return Shrunk(best, tries, True)
                trial = (*best[:axis], value, *best[axis + 1 :])
                tries += 1
                if fails(trial):
                    best, changed = trial, True
                    break
    return Shrunk(best, tries, False)


def pick_for_shrinking(cases: Sequence[Case], rows: Mapping[str, Mapping[str, Any]], limit: int) -> list[Case]:
    """The largest failing generated case of each (op family, dtypes, engine) group, at most ``limit`` groups.

    One per group: the cases of a group usually fail for one reason, and the
    largest gives the search the most room.
    """
    chosen: dict[tuple[Any, ...], Case] = {}
    for case in cases:
        row = rows.get(case.case_id)
        if row is None or row["verdict"] != FAIL or case.recipe is None:
            continue
        group = (row.get("family"), tuple(row.get("dtypes", ())), str(case.engine))
        best = chosen.get(group)
        if best is None:
            if len(chosen) < limit:
                chosen[group] = case
        elif math.prod(case.recipe.shape) > math.prod(best.recipe.shape):
            chosen[group] = case
    return list(chosen.values())


def shrink_case(case: Case, spec: Spec, budget: int = DEFAULT_BUDGET) -> tuple[Shrunk, Case]:
    """Shrink a failing generated case; returns the search's result and the smallest failing case."""
    if case.recipe is None:
        raise SigdnnError(f"case {case.case_id} ({case.source}) is a graph file: only generated cases shrink")
    made: dict[tuple[int, ...], Case] = {}

    def fails(shape: tuple[int, ...]) -> bool:
        recipe = case.recipe.with_shape(shape)
        try:
            graph = recipe.build()
        except SigdnnError:  # no graph of this shape (an op's rule): not a failure
            return False
        smaller = make_case(graph.serialize(), graph.name, case.seed, spec, case.engine, recipe, recipe.label())
        reference = compute_reference(smaller.graph, smaller.seed, spread=smaller.tolerance is None)
        failed = judge(smaller, reference)["verdict"] == FAIL
        if failed:
            made[shape] = smaller
        return failed

    result = smallest_failing(case.recipe.shape, fails, budget)
    return result, made.get(result.shape, case)
