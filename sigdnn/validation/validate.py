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
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any

import attrs
import numpy as np

from sigdnn.executor import ExecutionPlan, Executor
from sigdnn.executor.plan import Step
from sigdnn.graph.deserialize import deserialize
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor
from sigdnn.runtime.device import ExecutionContext
from sigdnn.validation import table as table_format
from sigdnn.validation.compare import Comparison, Errors, compare, errors, summarize
from sigdnn.validation.inputs import random_inputs
from sigdnn.validation.table import END_TO_END
from sigdnn.validation.tolerances import Tolerance, node_tolerance, output_tolerance, step_tolerance
from sigdnn.validation.truth import REFERENCE_ONLY, run_context, truth_executor, truth_name
from sigdnn.validation.unspecified import specified, unspecified_positions


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


@attrs.frozen
class StepReference:
    """The reference's side of one device step's check.

    ``values``: the exits' reference values. ``sums``: sum(|terms|) per
    element for each tensor downstream of a linear reduction (matmul, conv)
    inside the step, carried through elementwise nodes and data movement,
    so a fused epilogue keeps its GEMM's accumulation bound. ``through``:
    the same from the graph's inputs on, seeded with the earlier steps'
    (the end-to-end check of an output downstream of a GEMM in another step
    needs that GEMM's bound, while the step check must not get it: it starts
    from the device's own entries). ``carried``: in a fused step, the error
    the step's other nodes bring to each exit element (see ``_carry_errors``).
    ``errors_through``: every node's error carried the same way from the
    graph's inputs on (seeded with the earlier steps'), for the end-to-end
    checks: an output that cancels keeps the errors of the values before it.
    """

    values: dict[int, np.ndarray]
    sums: dict[int, np.ndarray]
    through: dict[int, np.ndarray]
    carried: dict[int, np.ndarray]
    errors_through: dict[int, np.ndarray]


def _carry_errors(
    graph: Graph,
    node: Node,
    plan: Any,
    ins: Mapping[str, np.ndarray],
    outs: Mapping[str, np.ndarray],
    errs: dict[int, np.ndarray],
    carried: dict[int, np.ndarray],
    context: ExecutionContext,
) -> None:
    """The error bound of each float output of ``node`` inside a fused step, at its own magnitude.

    ``carried[uid]`` is what the inputs' bounds (``errs``, from the step's
    earlier nodes; the step's entries come from the device and carry none)
    do to the output: the reference plan run again with each carrying input
    moved by its bound either way, the larger change kept, summed over the
    inputs (first order, exact in the bound for elementwise ops: a tiny exit
    after cancellation keeps the inner nodes' errors at their own size).
    Data movement moves the bounds; a linear reduction takes them through
    its |terms| run. ``errs[uid]`` adds the node's own atol + rtol * |value|.
    """
    op = node.op
    bounds = {p: errs[uid] for p, uid in op.inputs().items() if uid in errs}
    floats = {p: uid for p, uid in op.outputs().items() if graph.dtype_of(graph.tensors[uid]).is_float}
    if not floats:
        return
    if not bounds:
        arrived = {p: np.zeros(outs[p].shape) for p in floats}
    else:

        def run(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            results = {p: np.empty(a.shape) if p in floats else np.empty_like(a) for p, a in outs.items()}
            plan.execute({**inputs, **results}, context)
            return {p: results[p] for p in floats}

        if op.moves_data:
            arrived = run({p: bounds.get(p, np.zeros(a.shape)) for p, a in ins.items()})
        elif op.sums_absolute_terms:
            absolute = {p: np.abs(a) for p, a in ins.items()}
            arrived = {p: np.zeros(outs[p].shape) for p in floats}
            for p, bound in bounds.items():
                for q, value in run({**absolute, p: bound}).items():
                    arrived[q] = arrived[q] + value
        else:
            base = run(ins)
            arrived = {p: np.zeros(outs[p].shape) for p in floats}
            for p, bound in bounds.items():
                # A float64 bound promotes the moved input to float64: the move is exact.
                moved = [run({**ins, p: ins[p] + sign * bound}) for sign in (1.0, -1.0)]
                for q in floats:
                    with np.errstate(invalid="ignore", over="ignore"):  # an unbounded change counts as none
                        change = np.fmax(np.abs(moved[0][q] - base[q]), np.abs(moved[1][q] - base[q]))
                    arrived[q] = arrived[q] + np.where(np.isfinite(change), change, 0.0)
    for p, uid in floats.items():
        own = node_tolerance(graph, node, uid)
        carried[uid] = arrived[p]
        with np.errstate(invalid="ignore", over="ignore"):
            magnitude = np.abs(np.where(np.isfinite(outs[p]), outs[p], 0).astype(np.float64))
        errs[uid] = arrived[p] + own.atol + own.rtol * magnitude


def _run_reference(
    graph: Graph,
    step: Step,
    plans: Mapping[str, Step],
    seen: Mapping[str, np.ndarray],
    upstream: Mapping[int, np.ndarray],
    upstream_errors: Mapping[int, np.ndarray],
    context: ExecutionContext,
) -> StepReference:
    """The reference's exit values for one device step, fed the entry tensors the device saw, and their bounds."""
    values: dict[int, np.ndarray] = {}
    sums: dict[int, np.ndarray] = {}
    errs: dict[int, np.ndarray] = {}
    arrivals: dict[int, np.ndarray] = {}
    errors_through = {uid: upstream_errors[uid] for uid in step.reads if uid in upstream_errors}
    fused = len(step.nodes) > 1
    through = {uid: upstream[uid] for uid in step.reads if uid in upstream}

    def entry(uid: int) -> np.ndarray:
        if uid not in values:
            t = graph.tensors[uid]
            values[uid] = np.asarray(seen[t.name], dtype=graph.dtype_of(t).numpy)
        return values[uid]

    for node in step.nodes:
        reference = plans[node.name]
        op = node.op
        ins = {port: entry(uid) for port, uid in op.inputs().items()}
        outs = {port: np.empty(graph.tensors[uid].dims, graph.dtype_of(graph.tensors[uid]).numpy)
                for port, uid in op.outputs().items()}  # fmt: skip
        reference.plan.execute({**ins, **outs}, context)
        for port, uid in op.outputs().items():
            values[uid] = outs[port]
        if fused:
            _carry_errors(graph, node, reference.plan, ins, outs, errs, arrivals, context)
        _carry_errors(graph, node, reference.plan, ins, outs, errors_through, {}, context)
        if op.sums_absolute_terms:
            absolute_outs = {p: np.empty_like(a) for p, a in outs.items()}
            reference.plan.execute({**{p: np.abs(a) for p, a in ins.items()}, **absolute_outs}, context)
            for p, uid in op.outputs().items():
                sums[uid] = through[uid] = absolute_outs[p].astype(np.float64)
        elif op.elementwise():
            for table in (sums, through):
                carried = [table[uid] for uid in op.inputs().values() if uid in table]
                if carried:
                    for port, uid in op.outputs().items():
                        table[uid] = np.broadcast_to(sum(carried[1:], carried[0]), outs[port].shape)
        elif op.moves_data:
            # Each output element is one input element: the op itself moves the bounds with the values
            # (the reference copies float64 into float64 as is; an input without a bound contributes 0).
            for table in (sums, through):
                carried = {p: table[uid] for p, uid in op.inputs().items() if uid in table}
                if carried:
                    moved = {p: np.empty(a.shape) for p, a in outs.items()}
                    bounds = {p: carried.get(p, np.zeros(a.shape)) for p, a in ins.items()}
                    reference.plan.execute({**bounds, **moved}, context)
                    table.update({uid: moved[p] for p, uid in op.outputs().items()})
        else:
            # A non-linear reduction (a norm, softmax, attention): no |terms| run exists, so its
            # accumulation bound is normwise, scaled by the output's largest magnitude (an average over
            # probability weights: the averaged input's, which bounds sum|terms|).
            tensors = {p: graph.tensors[u] for p, u in op.ports().items()}
            for port, uid in op.outputs().items():
                if op.reduction_length(tensors, port) > 1:  # dims are >= 1: never empty
                    averaged = op.probability_weighted.get(port)
                    basis = outs[port] if averaged is None else ins[averaged]
                    with np.errstate(invalid="ignore"):
                        scale = np.nanmax(np.abs(np.where(np.isfinite(basis), basis, 0).astype(np.float64)))
                    sums[uid] = through[uid] = np.full(outs[port].shape, scale)
    exits = {uid: values[uid] for uid in step.writes}
    carried = {uid: arrivals[uid] for uid in step.writes if uid in arrivals}
    return StepReference(exits, sums, through, carried, errors_through)


def compare_steps(
    graph: Graph,
    reference: ExecutionPlan,
    device: ExecutionPlan,
    seen: Mapping[str, np.ndarray],
    sums: dict[int, np.ndarray] | None = None,
    tolerance: Tolerance | None = None,
    carried: dict[int, np.ndarray] | None = None,
    context: ExecutionContext | None = None,
) -> tuple[NodeCheck, ...]:
    """Each device step's exits against the reference recomputed from the step's own entries.

    A step is a node or a region; ``reference`` must plan node by node
    (fusion off). ``sums`` receives sum(|terms|) per element of every tensor
    downstream of a reduction, carried from step to step (for the
    end-to-end checks of the outputs); ``carried`` likewise receives each
    tensor's error carried from the graph's inputs. ``tolerance`` replaces the computed one (a campaign's override).
    ``context``: what the reference's plans run with (the GPU reference's device; the CPU by default).
    """
    plans = {s.node.name: s for s in reference.steps}
    sums = {} if sums is None else sums
    carried = {} if carried is None else carried
    checks = []
    free = unspecified_positions(graph, seen)
    for step in device.steps:
        truth = _run_reference(graph, step, plans, seen, sums, carried, context or ExecutionContext())
        sums.update(truth.through)
        carried.update(truth.errors_through)
        for uid, value in truth.values.items():
            name = graph.tensors[uid].name
            allowed = tolerance or step_tolerance(graph, list(step.nodes), uid)
            got = specified(seen[name], value, free.get(name))
            found = errors(got, value, allowed, truth.sums.get(uid), truth.carried.get(uid))
            comparison = summarize(name, str(value.dtype), allowed, found)
            checks.append(NodeCheck(step.name, step.builder.name, comparison, None if comparison.passed else found))
    return tuple(checks)


def step_judge(
    graph: Graph, nodes: Sequence[Node], writes: Sequence[int], inputs: Mapping[str, np.ndarray]
) -> Callable[[Mapping[str, np.ndarray]], str | None]:
    """A judge of a step's outputs: None when they match the reference fed ``inputs`` (by name), else why not.

    The quick validation a measured builder choice runs on each candidate
    (``sigdnn.executor.autotune``), with ``validate``'s tolerances; the
    reference runs once, however many candidates are judged.
    """
    reference = Executor("reference", fusion=False, registry=REFERENCE_ONLY).prepare(graph)
    step = SimpleNamespace(nodes=tuple(nodes), writes=tuple(writes), reads=())  # nothing upstream to carry
    plans = {s.node.name: s for s in reference.steps}
    truth = _run_reference(graph, step, plans, inputs, {}, {}, ExecutionContext())  # type: ignore[arg-type]

    free = unspecified_positions(graph, inputs)

    def judge(outputs: Mapping[str, np.ndarray]) -> str | None:
        for uid, value in truth.values.items():
            name = graph.tensors[uid].name
            allowed = step_tolerance(graph, list(nodes), uid)
            got = specified(outputs[name], value, free.get(name))
            c = compare(name, got, value, allowed, truth.sums.get(uid), truth.carried.get(uid))
            if not c.passed:
                return (
                    f"{name}: {c.mismatches + c.nan_inf_mismatches} of {c.size} elements outside {c.tolerance} "
                    f"(max abs error {c.max_abs_error:.3g})"
                )
        return None

    return judge


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
) -> ValidationReport:
    """Run ``graph`` on ``backend`` (or ``executor``) and on the reference; compare node by node.

    ``expected``: the reference's outputs for these inputs, when already known
    (a campaign caches them by graph digest and seed, so several engines share
    one reference run). ``tolerance`` replaces every computed tolerance.
    ``got`` receives the device's outputs (host arrays). ``truth``: "cpu" (the NumPy reference), "gpu"
    (the GPU reference, float64 on the device) or None for "gpu" where it can run, else "cpu"
    (``validation.truth``); the report names it. Tolerances are the same either way.
    """
    g = graph if isinstance(graph, Graph) else deserialize(graph)
    data: Mapping[Any, Any] = inputs if inputs is not None else random_inputs(g, seed)
    reference = truth_executor(truth)
    reference_plan = reference.prepare(g)
    want = expected if expected is not None else reference.execute(reference_plan, data)
    device = executor or Executor(backend)
    device_plan = device.prepare(g)
    captured: dict[str, Any] = {}
    outs = device.execute(device_plan, data, to_host=True, capture=captured)
    if got is not None:
        got.update(outs)
    seen = {**_by_name(g, data), **captured}
    sums: dict[int, np.ndarray] = {}
    carried: dict[int, np.ndarray] = {}
    nodes = compare_steps(g, reference_plan, device_plan, seen, sums, tolerance, carried, run_context(reference))
    free = unspecified_positions(g, seen)
    outputs = tuple(
        compare(
            t.name,
            specified(outs[t.name], want[t.name], free.get(t.name)),
            want[t.name],
            tolerance or output_tolerance(g, t.uid),
            sums.get(t.uid),
            carried.get(t.uid),
        )
        for t in g.outputs
    )
    return ValidationReport(g.name, nodes, outputs, truth_name(reference))
