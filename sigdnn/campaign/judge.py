"""One case, judged: the reference's result (computed once per graph digest + seed) and a device's verdict.

These functions run inside campaign workers (and the shrinker); they hold
no Ray code, so they are tested in-process.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from sigdnn.accuracy.arrays import HOST
from sigdnn.accuracy.compare import Comparison, ulp_of
from sigdnn.campaign.cases import Case, describe
from sigdnn.dtypes import DataType
from sigdnn.errors import SigdnnError
from sigdnn.executor import Executor
from sigdnn.graph.deserialize import deserialize
from sigdnn.graph.graph import Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.signature_keys import key_for
from sigdnn.validation import random_inputs, validate
from sigdnn.validation.checks import bookkeeping, truth_spread
from sigdnn.validation.truth import truth_executor

PASS, FAIL, ERROR = "pass", "fail", "error"


@attrs.frozen
class ReferenceResult:
    """A case's inputs and the reference's outputs: what every engine of the case is judged against."""

    inputs: dict[str, np.ndarray]
    outputs: dict[str, np.ndarray]
    seconds: float
    spread: dict[int, np.ndarray] | None = None  # the outputs' measured spread; None: not measured


def compute_reference(
    graph: bytes, seed: int, limits: Limits = DEFAULT_LIMITS, truth: str | None = None, spread: bool = True
) -> ReferenceResult:
    """Random inputs from ``seed``, the reference's outputs, node by node, and (``spread``) their measured spread.

    Planned with sigdnn's reference builders alone (validation's truth side):
    a plugin registered beside them never stands in for the ground truth.
    ``truth``: the CPU or GPU reference (validation.truth; default: the GPU one where the worker has it).
    The spread is what validation allows end to end past the carried bounds; measured here, once, it serves
    every engine of the case (a tolerance override needs none: ``spread=False``).
    """
    started = time.perf_counter()
    g = deserialize(graph, limits=limits)
    inputs = random_inputs(g, seed)
    reference = truth_executor(truth, limits=limits)
    xp = bookkeeping(reference)  # the GPU truth's spread runs stay on its device; only the results come back
    plan = reference.prepare(g)
    outputs = reference.execute(plan, inputs, to_host=xp is HOST)
    widths = truth_spread(g, reference, plan, inputs, outputs, xp) if spread else None
    return ReferenceResult(
        inputs,
        {name: np.asarray(xp.host(value)) for name, value in outputs.items()},
        time.perf_counter() - started,
        None if widths is None else {uid: np.asarray(xp.host(width)) for uid, width in widths.items()},
    )


_EXECUTORS: dict[tuple[str, int | str | None, Limits], Executor] = {}


def executor_for(backend: str, engine: int | str | None, limits: Limits = DEFAULT_LIMITS) -> Executor:
    """One executor per (backend, engine) in a worker: its plan and kernel caches serve every case."""
    key = (backend, engine, limits)
    if key not in _EXECUTORS:
        _EXECUTORS[key] = Executor(backend, engine=engine, limits=limits)
    return _EXECUTORS[key]


def judge(case: Case, reference: ReferenceResult, limits: Limits = DEFAULT_LIMITS) -> dict[str, Any]:
    """The case's results row: verdict, errors, worst element, time; an exception is an ``error`` verdict."""
    started = time.perf_counter()
    row = describe(case)
    try:
        g = deserialize(case.graph, limits=limits)
        row.update(shape_facts(g))
        executor = executor_for(case.backend, case.engine, limits)
        got: dict[str, np.ndarray] = {}
        report = validate(
            g,
            reference.inputs,
            executor=executor,
            expected=reference.outputs,
            tolerance=case.tolerance,
            got=got,
            spread=reference.spread,
        )
    except SigdnnError as e:
        row.update(verdict=ERROR, error=f"{type(e).__name__}: {e}", seconds=time.perf_counter() - started)
        return row
    comparisons = [c.comparison for c in report.nodes] + list(report.outputs)
    worst = max(comparisons, key=_badness)
    row.update(
        verdict=PASS if report.passed else FAIL,
        truth=report.truth,
        builders=sorted(set(report.builders.values())),
        device=executor.device.kind,
        max_ulp_error=max_ulps(g, got, reference.outputs),
        max_abs_error=max(c.max_abs_error for c in comparisons),
        max_rel_error=max(c.max_rel_error for c in comparisons),
        mismatches=sum(c.mismatches + c.nan_inf_mismatches for c in comparisons),
        worst={
            "tensor": worst.name,
            "index": list(worst.worst_index) if worst.worst_index is not None else None,
            "got": worst.worst_got,
            "want": worst.worst_want,
            "tolerance": str(worst.tolerance),
        },
        seconds=time.perf_counter() - started,
    )
    return row


def _badness(c: Comparison) -> tuple[bool, float]:
    return (not c.passed, c.max_abs_error)


def shape_facts(g: Graph) -> dict[str, Any]:
    """Key, op families, dtypes and shapes of a graph, for the row (and the summary's grouping)."""
    keys = [key_for(node, g) for node in g.nodes]
    return {
        "key": "; ".join(dict.fromkeys(str(k) for k in keys)),
        "family": "+".join(dict.fromkeys(_family(k) for k in keys)),
        "dtypes": sorted({g.dtype_of(t).name.lower() for t in (*g.inputs, *g.outputs)}),
        "shapes": {t.name: list(t.dims) for t in (*g.inputs, *g.outputs)},
    }


def _family(key: Any) -> str:
    mode = key.trait("mode")
    return f"{key.op}[{mode}]" if mode else key.op


def ulp(values: np.ndarray, dtype: DataType) -> np.ndarray:
    """The spacing of ``dtype`` at each value (its smallest subnormal at zero and below): validation's rule."""
    return ulp_of(values.astype(np.float64), dtype.numpy)


def max_ulps(g: Graph, got: Mapping[str, np.ndarray], want: Mapping[str, np.ndarray]) -> float:
    """The largest |got - want| in units of the output dtype's spacing at ``want`` (integers: plain difference)."""
    worst = 0.0
    for t in g.outputs:
        dtype = g.dtype_of(t)
        a, b = np.asarray(got[t.name]).astype(np.float64), np.asarray(want[t.name]).astype(np.float64)
        finite = np.isfinite(a) & np.isfinite(b)
        error = np.abs(a[finite] - b[finite])
        if not error.size:
            continue
        if dtype.is_float:
            error = error / ulp(b[finite], dtype)
        worst = max(worst, float(error.max()))
    return worst
