"""Running a campaign on Ray: references once per graph and seed, cases on a pool of actors, rows as they finish.

- The reference of each (graph digest, seed) is computed once: a Ray task
  on a CPU, or on a GPU campaign by the case actor that judges its first
  engine (the GPU truth needs the actor's GPU; an actor runs its calls in
  the order they were submitted, and a reference is submitted before the
  cases that wait for it, so no actor waits on one queued behind it). Every
  engine's case of that graph and seed gets the same object (Ray moves it
  to the worker), and it is dropped once they are done.
- Cases run on actors (one per GPU, ``num_gpus=1``; on the reference
  backend one per two CPUs, leaving the others to reference tasks). A
  worker that dies is restarted and its case re-run, up to ``retries``
  times; a case that still cannot finish is an ``error`` row, nothing more.
- Rows are appended to ``results.jsonl`` as they arrive; ``resume`` skips
  every case id already there, so a campaign killed at any point loses at
  most the cases in flight. A resume keeps every readable row, reports the
  lines it could not read and never truncates the file; results that are a
  symbolic link or have a second name are refused before any work.
- Local runs start Ray's local cluster for the run (workers see the
  driver's ``sys.path``, so plugins importable here are importable there);
  an address joins a running cluster, whose machines must have sigdnn and
  the plugins installed.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections import Counter, deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import attrs

from sigdnn.campaign.cases import Case, CaseList, describe, generate_cases
from sigdnn.campaign.judge import ERROR, FAIL
from sigdnn.campaign.resources import check_local_gpus
from sigdnn.campaign.results import (
    FAILURES,
    RESULTS,
    SHRUNK,
    Earlier,
    ResultsLog,
    check_results_path,
    finished,
    write_failure,
)
from sigdnn.campaign.shrink import DEFAULT_BUDGET, pick_for_shrinking
from sigdnn.campaign.spec import Spec
from sigdnn.campaign.workers import CaseWorker
from sigdnn.errors import UsageError
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits

LOCAL = "local"
CALLS_PER_ACTOR = 4  # queued on each actor, so it never waits for the driver


@attrs.frozen
class CampaignResult:
    output: Path
    rows: tuple[dict[str, Any], ...]  # every case's row, earlier runs' included
    ran: int  # cases this run judged
    resumed: int  # cases an earlier run had finished
    references: int  # reference tasks this run submitted
    skipped: tuple[tuple[str, str], ...]  # generated combinations no graph could be made of
    shrunk: tuple[dict[str, Any], ...]
    unreadable: tuple[int, ...] = ()  # lines of the earlier results that were not rows (skipped, kept in the file)

    @property
    def failures(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["verdict"] == FAIL]

    @property
    def errors(self) -> list[dict[str, Any]]:
        return [r for r in self.rows if r["verdict"] == ERROR]


def run_campaign(
    spec: Spec,
    *,
    ray_address: str = LOCAL,
    gpus: int | None = None,
    resume: bool = False,
    limits: Limits = DEFAULT_LIMITS,
    on_row: Callable[[dict[str, Any]], None] | None = None,
    on_start: Callable[[int], None] | None = None,
) -> CampaignResult:
    """Run every case of ``spec`` not already finished; see the module docstring."""
    import ray

    pending = pending_cases(spec, limits, resume)
    if on_start is not None:
        on_start(len(pending.cases))
    owned = _connect(ray, ray_address, gpus, spec.backend)
    try:
        pool = _Pool(ray, spec, limits)
        run_id = uuid.uuid4().hex[:12]
        rows = dict(pending.earlier.rows)
        with ResultsLog(spec.output / RESULTS) as log:
            references = _run_cases(ray, pool, pending.cases, spec, log, run_id, rows, on_row)
        shrunk = _shrink(ray, pool, pending.plan, rows, spec)
    finally:
        if owned:
            ray.shutdown()
    return campaign_result(spec, pending, rows, references, shrunk)


@attrs.frozen
class Pending:
    """A campaign's generated cases, the rows earlier runs finished and the cases still to run."""

    plan: CaseList
    earlier: Earlier
    cases: tuple[Case, ...]


def pending_cases(spec: Spec, limits: Limits, resume: bool) -> Pending:
    """Generate the cases and read earlier results (``resume``); refuse results a run would overwrite."""
    plan = generate_cases(spec, limits)
    results_path = spec.output / RESULTS
    check_results_path(results_path)
    check_results_path(spec.output / SHRUNK)
    if results_path.exists() and results_path.stat().st_size and not resume:
        raise UsageError(
            f"{results_path} already holds results: pass --resume to finish that campaign, "
            "or give another output folder"
        )
    earlier = finished(results_path) if resume else Earlier({})
    return Pending(plan, earlier, tuple(c for c in plan.cases if c.case_id not in earlier.rows))


def campaign_result(
    spec: Spec, pending: Pending, rows: dict[str, dict[str, Any]], references: int, shrunk: tuple[dict[str, Any], ...]
) -> CampaignResult:
    """Every case's row in the plan's order, with what this run did."""
    plan = pending.plan
    ordered = tuple(rows[c.case_id] for c in plan.cases if c.case_id in rows)
    return CampaignResult(spec.output, ordered, len(pending.cases), len(pending.earlier.rows), references,
                          plan.skipped, shrunk, pending.earlier.unreadable)  # fmt: skip


def shrink_entry(
    case: Case, shrunk: Any, smallest: Case, reference: Any, rows: dict[str, dict[str, Any]], spec: Spec
) -> dict[str, Any]:
    """A shrunk case's line: the shapes, the tries and how to replay the smallest failing case."""
    if smallest.case_id == case.case_id:  # nothing smaller fails: the case's own files replay it
        command = rows[case.case_id]["reproduce"]
    else:
        command = write_failure(spec.output / FAILURES, smallest, reference, {"shrunk_from": case.case_id})
    return {
        "case": case.case_id,
        "from": list(case.recipe.shape),
        "to": list(shrunk.shape),
        "tries": shrunk.tries,
        "budget_exhausted": shrunk.exhausted,
        "smallest": smallest.recipe.label(),
        "reproduce": command,
    }


def local_runtime_env() -> dict[str, Any]:
    """Workers of a local cluster import from the driver's ``sys.path`` (plugins found here are found there)."""
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p and os.path.exists(p))}}


def _connect(ray: Any, address: str, gpus: int | None, backend: str) -> bool:
    """Start or join a cluster; True when this run started it (and so stops it)."""
    owned = False
    if not ray.is_initialized():
        if address == LOCAL:
            check_local_gpus(backend, gpus)  # before Ray starts: it would offer GPUs the machine lacks
            ray.init(num_gpus=gpus, include_dashboard=False, log_to_driver=False, runtime_env=local_runtime_env())
        else:
            if gpus is not None:
                raise UsageError(f"--gpus sets a local cluster's GPUs; the cluster at {address} has its own")
            ray.init(address=address, log_to_driver=False)
        owned = True
    if backend == "gpu" and not ray.cluster_resources().get("GPU"):
        if owned:
            ray.shutdown()
        raise UsageError("backend gpu, but the Ray cluster has no GPU (give --gpus N, or validate a CPU backend)")
    return owned


class _Pool:
    """The case actors and the reference task, with the resources each asks Ray for."""

    def __init__(self, ray: Any, spec: Spec, limits: Limits) -> None:
        resources = ray.cluster_resources()
        cpus = int(resources.get("CPU", 1))
        if spec.backend == "gpu":
            count, options = int(resources["GPU"]), {"num_gpus": 1, "num_cpus": 1 if cpus > resources["GPU"] else 0}
        else:
            count, options = max(1, cpus // 2), {"num_cpus": 1}
        actor = ray.remote(CaseWorker).options(max_restarts=-1, max_task_retries=spec.retries, **options)
        self.actors = [actor.remote(limits) for _ in range(count)]
        self.in_flight = [0] * count
        self.on_actors = spec.backend == "gpu"  # the GPU truth needs a GPU: there the case actors compute it
        self.reference_task = ray.remote(_reference).options(num_cpus=1, max_retries=spec.retries)
        self.limits = limits

    def reference(self, index: int, case: Case) -> Any:
        """Submit ``case``'s reference: on actor ``index`` (which judges the case next) or as a CPU task."""
        spread = case.tolerance is None
        if self.on_actors:
            return self.actors[index].reference.remote(case.graph, case.seed, spread)
        return self.reference_task.remote(case.graph, case.seed, self.limits, spread)

    def free(self) -> int | None:
        """The actor with the fewest queued calls, or None when every queue is full."""
        index = min(range(len(self.actors)), key=self.in_flight.__getitem__)
        return index if self.in_flight[index] < CALLS_PER_ACTOR else None


def _reference(graph: bytes, seed: int, limits: Limits, spread: bool) -> Any:
    from sigdnn.campaign.judge import compute_reference

    return compute_reference(graph, seed, limits, spread=spread)


def _run_cases(
    ray: Any,
    pool: _Pool,
    cases: Sequence[Case],
    spec: Spec,
    log: ResultsLog,
    run_id: str,
    rows: dict[str, dict[str, Any]],
    on_row: Callable[[dict[str, Any]], None] | None,
) -> int:
    """Judge ``cases`` on the pool, writing each row as it arrives; returns the reference tasks submitted."""
    waiting = deque(cases)
    uses = Counter(c.reference_key for c in cases)
    references: dict[str, Any] = {}
    submitted_references = 0
    running: dict[Any, tuple[Case, int]] = {}
    while waiting or running:
        while waiting and (index := pool.free()) is not None:
            case = waiting.popleft()
            if case.reference_key not in references:
                references[case.reference_key] = pool.reference(index, case)
                submitted_references += 1
            running[pool.actors[index].judge.remote(case, references[case.reference_key])] = (case, index)
            pool.in_flight[index] += 1
        ready, _ = ray.wait(list(running), num_returns=1)
        case, index = running.pop(ready[0])
        pool.in_flight[index] -= 1
        row = _row(ray, ready[0], case)
        if row["verdict"] == FAIL:
            reference = ray.get(references[case.reference_key])
            row["reproduce"] = write_failure(spec.output / FAILURES, case, reference, row)
        uses[case.reference_key] -= 1
        if not uses[case.reference_key]:
            del references[case.reference_key]  # every engine of this graph and seed is done: free the object
        row["run"] = run_id
        log.write(row)
        rows[case.case_id] = row
        if on_row is not None:
            on_row(row)
    return submitted_references


def _row(ray: Any, ref: Any, case: Case) -> dict[str, Any]:
    """The case's row; a case whose worker kept dying (or whose reference failed) is an error row."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayError as e:
        cause = getattr(e, "cause", None) or e
        return {**describe(case), "verdict": ERROR, "error": f"{type(cause).__name__}: {cause}".splitlines()[0]}


def _shrink(
    ray: Any, pool: _Pool, plan: CaseList, rows: dict[str, dict[str, Any]], spec: Spec
) -> tuple[dict[str, Any], ...]:
    """Shrink the cases ``pick_for_shrinking`` chooses (resumed: those not shrunk yet), on the actors."""
    path = spec.output / SHRUNK
    earlier = finished(path).rows
    chosen = pick_for_shrinking(plan.cases, rows, spec.shrink)
    todo = [c for c in chosen if c.case_id not in earlier]
    calls = {
        pool.actors[i % len(pool.actors)].shrink.remote(case, spec, DEFAULT_BUDGET): case for i, case in enumerate(todo)
    }
    found = dict(earlier)
    with ResultsLog(path) as log:
        for ref, case in calls.items():
            try:
                shrunk, smallest, reference = ray.get(ref)
            except ray.exceptions.RayError as e:
                found[case.case_id] = {"case": case.case_id, "error": f"{type(e).__name__}"}
                continue
            entry = shrink_entry(case, shrunk, smallest, reference, rows, spec)
            log.write(entry)
            found[case.case_id] = entry
    return tuple(found[c.case_id] for c in chosen)
