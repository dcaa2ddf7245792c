"""validate(): the same graph and inputs through the reference and a device backend.

The verdict is taken step by step (a step is a node or a fused region): the
device run captures every tensor a step writes, and the reference
recomputes the step's nodes from the device's own entry tensors for that
step, so one wrong kernel shows up at its step with a tight tolerance
instead of being blurred by the errors that pile up along a chain.
Graph outputs are also compared end to end against a pure reference run.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import attrs
import numpy as np

from sigdnn.accuracy.arrays import HOST, Arrays
from sigdnn.accuracy.compare import Comparison, Errors, compare_in
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.accuracy.spread import output_spread
from sigdnn.accuracy.step_reference import run_reference
from sigdnn.accuracy.tolerances import Tolerance, output_tolerances, step_tolerance
from sigdnn.accuracy.unspecified import specified, unspecified_positions
from sigdnn.executor import ExecutionPlan, Executor
from sigdnn.graph.deserialize import deserialize
from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor
from sigdnn.runtime.device import ExecutionContext
from sigdnn.validation import table as table_format
from sigdnn.validation.device_arrays import DeviceArrays
from sigdnn.validation.table import END_TO_END
from sigdnn.validation.truth import run_context, truth_executor, truth_name


@attrs.frozen
class NodeCheck:
    node: str
    builder: str  # the device builder that ran it
    comparison: Comparison
    errors: Errors | None = attrs.field(default=None, eq=False, repr=False)  # kept when the check fails (plots)


@attrs.frozen
class ValidationReport:
    graph: str
    nodes: tuple[NodeCheck, ...]
    outputs: tuple[Comparison, ...]
    truth: str = "cpu"  # which reference judged: "cpu" or "gpu" (validation.truth)

    @property
    def builders(self) -> dict[str, str]:
        return {c.node: c.builder for c in self.nodes}

    @property
    def passed(self) -> bool:
        return all(c.comparison.passed for c in self.nodes) and all(c.passed for c in self.outputs)

    @property
    def failures(self) -> tuple[NodeCheck, ...]:
        return tuple(c for c in self.nodes if not c.comparison.passed)

    def _checks(self) -> list[tuple[str, str, Comparison]]:
        """(step, builder, comparison): each step tensor (same inputs as the device), then each output end to end."""
        return [(c.node, c.builder, c.comparison) for c in self.nodes] + [(END_TO_END, "", c) for c in self.outputs]

    def rows(self) -> list[list[str]]:
        """One row per step tensor, then one per graph output; columns as ``table_format.COLUMNS``."""
        return [table_format.row(*check) for check in self._checks()]

    def details(self) -> list[str]:
        """A line (wrapped to table_format.WIDTH) per failing tensor: its worst element and the tolerance it broke."""
        return table_format.failure_lines([(step, c) for step, _, c in self._checks()])

    def table(self) -> str:
        """The rows as plain text, the failure lines after them (the CLI draws the same rows)."""
        title = f"validation of '{self.graph}' against the {self.truth.upper()} reference: {self.verdict}"
        return table_format.plain(title, self.rows(), self.details())

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

    def to_json(self) -> str:
        return json.dumps(
            {
                "graph": self.graph,
                "passed": self.passed,
                "truth": self.truth,
                "nodes": [{"node": c.node, "builder": c.builder, **c.comparison.as_dict()} for c in self.nodes],
                "outputs": [c.as_dict() for c in self.outputs],
            },
            indent=2,
        )


def _by_name(graph: Graph, data: Mapping[Any, Any]) -> dict[str, np.ndarray]:
    """Host arrays of the inputs keyed by tensor name, plus graph scalars and constants.

    The keys are those the executor accepted: names, uids or Tensor objects (matched by uid, as it does).
    """
    values = {}
    for key, value in data.items():
        uid = None if isinstance(key, str) else key.uid if isinstance(key, Tensor) else int(key)
        name = key if uid is None else graph.tensors[uid].name
        values[name] = np.asarray(value)
    for t in graph.tensors.values():
        if t.value is not None and t.name not in values:
            values[t.name] = np.full(t.dims, t.scalar())
        elif t.data is not None and t.name not in values:
            values[t.name] = t.constant()
    return values


def truth_spread(
    graph: Graph,
    reference: Executor,
    plan: ExecutionPlan,
    data: Mapping[Any, Any],
    truth: Mapping[str, Any],
    xp: Arrays = HOST,
) -> dict[int, Any]:
    """The graph outputs' measured spread (accuracy.spread) around ``truth``, the reference's outputs for ``data``
    (arrays of ``xp``, as the spread it returns)."""
    entries = {name: xp.upload(value) for name, value in _by_name(graph, data).items()}
    return output_spread(graph, plan, entries, truth, run_context(reference), xp=xp)


def _wider(carried: Any, spread: Any, xp: Arrays) -> Any:
    """An output's end-to-end allowance: the carried bound, or the measured spread where that is larger."""
    if carried is None or spread is None:
        return spread if carried is None else carried
    return xp.fmax(carried, spread)


def compare_steps(
    graph: Graph,
    reference: ExecutionPlan,
    device: ExecutionPlan,
    seen: Mapping[str, Any],
    sums: dict[int, Any] | None = None,
    tolerance: Tolerance | None = None,
    carried: dict[int, Any] | None = None,
    context: ExecutionContext | None = None,
    xp: Arrays = HOST,
    release: bool = False,
) -> tuple[NodeCheck, ...]:
    """Each device step's exits against the reference recomputed from the step's own entries.

    A step is a node or a region; ``reference`` must plan node by node
    (fusion off). ``sums`` receives sum(|terms|) per element of every tensor
    downstream of a reduction, carried from step to step (for the
    end-to-end checks of the outputs); ``carried`` likewise receives each
    tensor's error carried from the graph's inputs. ``tolerance`` replaces the computed one (a campaign's override).
    ``context``: what the reference's plans run with (the GPU reference's device; the CPU by default).
    ``xp``: where ``seen`` and the bookkeeping live (``bookkeeping``). ``release``: drop each entry of
    ``seen`` (then a dict of the caller's), ``sums`` and ``carried`` once no later step reads its tensor and it is
    no graph output, so a full-size model keeps only the tensors still needed.
    """
    plans = {s.node.name: s for s in reference.steps}
    sums = {} if sums is None else sums
    carried = {} if carried is None else carried
    checks = []
    free = unspecified_positions(graph, seen, xp)
    last_read = {uid: i for i, step in enumerate(device.steps) for uid in step.reads}
    kept = {t.uid for t in graph.outputs}
    for index, step in enumerate(device.steps):
        truth = run_reference(graph, step, plans, seen, sums, carried, context or ExecutionContext(), xp)
        sums.update(truth.through)
        carried.update(truth.errors_through)
        for uid, value in truth.values.items():
            name = graph.tensors[uid].name
            allowed = tolerance or step_tolerance(graph, list(step.nodes), uid)
            got = specified(seen[name], value, free.get(name), xp)
            comparison, found = compare_in(xp, name, got, value, allowed, truth.sums.get(uid), truth.carried.get(uid))
            checks.append(NodeCheck(step.name, step.builder.name, comparison, found))
        if release:
            for table in (sums, carried):
                for uid in [u for u in table if u not in kept and last_read.get(u, -1) <= index]:
                    del table[uid]
            for uid in step.reads + step.writes:
                if uid not in kept and last_read.get(uid, -1) <= index:
                    seen.pop(graph.tensors[uid].name, None)  # type: ignore[attr-defined]
    return tuple(checks)


def bookkeeping(reference: Executor) -> Arrays:
    """Where validation keeps its arrays: beside the truth's values (the GPU reference's device, or the host)."""
    if reference.backend == "reference":
        return HOST
    return DeviceArrays(run_context(reference))


def validate(
    graph: Graph | bytes,
    inputs: Mapping[Any, np.ndarray] | None = None,
    seed: int = 0,
    *,
    backend: str = "gpu",
    executor: Executor | None = None,
    expected: Mapping[str, np.ndarray] | None = None,
    tolerance: Tolerance | None = None,
    got: dict[str, np.ndarray] | None = None,
    truth: str | Executor | None = None,
    spread: Mapping[int, Any] | None = None,
) -> ValidationReport:
    """Run ``graph`` on ``backend`` (or ``executor``) and on the reference; compare node by node.

    ``expected``: the reference's outputs for these inputs, when already known
    (a campaign caches them by graph digest and seed, so several engines share
    one reference run). ``tolerance`` replaces every computed tolerance.
    ``got`` receives the device's outputs (host arrays). ``truth``: "cpu" (the NumPy reference), "gpu"
    (the GPU reference, float64 on the device) or None for "gpu" where it can run, else "cpu"
    (``validation.truth``); the report names it. Tolerances are the same either way. With the GPU truth
    the device run's captures, the truth's values and every bound stay on the device (``bookkeeping``).
    ``spread``: the outputs' measured spread (``truth_spread``), when already known (a campaign measures it
    once per graph and seed, with ``expected``, for every engine).
    """
    g = graph if isinstance(graph, Graph) else deserialize(graph)
    data: Mapping[Any, Any] = inputs if inputs is not None else random_inputs(g, seed)
    reference = truth_executor(truth)
    xp = bookkeeping(reference)
    on_host = xp is HOST
    reference_plan = reference.prepare(g)
    want = expected if expected is not None else reference.execute(reference_plan, data, to_host=on_host)
    device = executor or Executor(backend)
    device_plan = device.prepare(g)
    captured: dict[str, Any] = {}
    outs = device.execute(device_plan, data, to_host=on_host, capture=captured)
    if got is not None:
        got.update({name: xp.host(value) for name, value in outs.items()})
    seen = {**{name: xp.upload(value) for name, value in _by_name(g, data).items()}, **captured}
    captured.clear()
    free = unspecified_positions(g, seen, xp)
    sums: dict[int, Any] = {}
    carried: dict[int, Any] = {}
    context = run_context(reference)
    nodes = compare_steps(g, reference_plan, device_plan, seen, sums, tolerance, carried, context, xp, release=True)
    if tolerance is not None:
        spread = {}
    elif spread is None:
        spread = truth_spread(g, reference, reference_plan, data, want, xp)
    allowed = {} if tolerance is not None else output_tolerances(g, (t.uid for t in g.outputs))
    outputs = tuple(
        compare_in(
            xp,
            t.name,
            specified(outs[t.name], want[t.name], free.get(t.name), xp),
            want[t.name],
            tolerance or allowed[t.uid],
            sums.get(t.uid),
            _wider(carried.get(t.uid), spread.get(t.uid), xp),
        )[0]
        for t in g.outputs
    )
    return ValidationReport(g.name, nodes, outputs, truth_name(reference))
