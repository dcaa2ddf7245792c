"""Running a campaign in this process, a case at a time: no Ray, one worker, the same rows and files.

For a machine without Ray, or one GPU where a cluster buys nothing: each
(graph digest, seed) reference is computed once, here, on the truth this
process has (the GPU reference where a GPU and the DSLs are present), kept
until the last engine of that graph and seed is judged, and dropped. Rows,
``--resume``, failure files and shrinking are those of the Ray runner
(:mod:`sigdnn.campaign.runner`), so either runner can finish the other's
campaign.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from sigdnn.campaign.cases import Case, describe
from sigdnn.campaign.judge import ERROR, FAIL, ReferenceResult, compute_reference
from sigdnn.campaign.results import FAILURES, RESULTS, SHRUNK, ResultsLog, finished, write_failure
from sigdnn.campaign.runner import CampaignResult, Pending, campaign_result, pending_cases, shrink_entry
from sigdnn.campaign.shrink import DEFAULT_BUDGET, pick_for_shrinking
from sigdnn.campaign.spec import Spec
from sigdnn.campaign.workers import CaseWorker
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits


def run_in_process(
    spec: Spec,
    *,
    resume: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> CampaignResult:
    """Run every case of ``spec`` not already finished, one after another; see the module docstring."""
    pending = pending_cases(spec, limits, resume)
    if on_start is not None:
        on_start(len(pending.cases))
    worker = CaseWorker(limits)
    rows = dict(pending.earlier.rows)
    with ResultsLog(spec.output / RESULTS) as log:
        references = _run_cases(worker, pending, spec, log, rows, on_row)
    shrunk = _shrink(worker, pending, rows, spec)
    return campaign_result(spec, pending, rows, references, shrunk)


def _run_cases(
    worker: CaseWorker,
    pending: Pending,
    spec: Spec,
    log: ResultsLog,
    rows: dict[str, dict[str, Any]],
    on_row: Callable[[dict[str, Any]], None] | None,
) -> int:
    """Judge the pending cases in order, writing each row as it is made; returns the references computed."""
    run_id, computed = uuid.uuid4().hex[:12], 0
    uses = Counter(c.reference_key for c in pending.cases)
    references: dict[str, ReferenceResult | str] = {}  # a reference, or why it could not be computed
    for case in pending.cases:
        if case.reference_key not in references:
            references[case.reference_key] = _reference(case, worker.limits)
            computed += 1
        reference = references[case.reference_key]
        row = _judged(worker, case, reference)
        if row["verdict"] == FAIL and isinstance(reference, ReferenceResult):
            row["reproduce"] = write_failure(spec.output / FAILURES, case, reference, row)
        uses[case.reference_key] -= 1
        if not uses[case.reference_key]:
            del references[case.reference_key]  # every engine of this graph and seed is done: free it
        row["run"] = run_id
        log.write(row)
        rows[case.case_id] = row
        if on_row is not None:
            on_row(row)
    return computed


def _reference(case: Case, limits: Limits) -> ReferenceResult | str:
    """The case's reference, or the error that stopped it (an ``error`` row for every engine of the case)."""
    try:
        return compute_reference(case.graph, case.seed, limits, spread=case.tolerance is None)
    except Exception as e:  # a campaign records a case it cannot finish and goes on, as a Ray worker's death
        return _error_text(e)


def _judged(worker: CaseWorker, case: Case, reference: ReferenceResult | str) -> dict[str, Any]:
    """The case's row; one whose reference or judging raised is an ``error`` row naming the exception."""
    if isinstance(reference, str):
        return {**describe(case), "verdict": ERROR, "error": reference}
    try:
        return worker.judge(case, reference)
    except Exception as e:  # judge itself turns sigdnn's errors into rows; anything else is an error row too
        return {**describe(case), "verdict": ERROR, "error": _error_text(e)}


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0]


def _shrink(
    worker: CaseWorker, pending: Pending, rows: dict[str, dict[str, Any]], spec: Spec
) -> tuple[dict[str, Any], ...]:
    """Shrink the cases ``pick_for_shrinking`` chooses (resumed: those not shrunk yet), here."""
    path = spec.output / SHRUNK
    found = dict(finished(path).rows)
    chosen = pick_for_shrinking(pending.plan.cases, rows, spec.shrink)
    with ResultsLog(path) as log:
        for case in (c for c in chosen if c.case_id not in found):
            try:
                shrunk, smallest, reference = worker.shrink(case, spec, DEFAULT_BUDGET)
            except Exception as e:  # as the Ray runner: the case keeps its row, its shrink names the error
                found[case.case_id] = {"case": case.case_id, "error": type(e).__name__}
                continue
            entry = shrink_entry(case, shrunk, smallest, reference, rows, spec)
            log.write(entry)
            found[case.case_id] = entry
    return tuple(found[c.case_id] for c in chosen)
