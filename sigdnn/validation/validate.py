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

from sigdnn.executor import ExecutionPlan, Executor
from sigdnn.executor.plan import Step
from sigdnn.graph.deserialize import deserialize
from sigdnn.graph.graph import Graph
from sigdnn.graph.ops.concatenate import Concatenate
from sigdnn.graph.ops.reshape import Reshape
from sigdnn.graph.ops.slice import Slice
from sigdnn.graph.ops.transpose import Transpose
from sigdnn.graph.tensor import Tensor
from sigdnn.runtime.device import ExecutionContext
from sigdnn.validation.compare import Comparison, compare
from sigdnn.validation.inputs import random_inputs
from sigdnn.validation.tolerances import output_tolerance, step_tolerance

MOVES_DATA = (Reshape, Transpose, Slice, Concatenate)  # ops whose outputs are copies of input elements


@attrs.frozen
class NodeCheck:
    node: str
    builder: str  # the device builder that ran it
    comparison: Comparison


@attrs.frozen
class ValidationReport:
    graph: str
    nodes: tuple[NodeCheck, ...]
    outputs: tuple[Comparison, ...]

    @property
    def builders(self) -> dict[str, str]:
        return {c.node: c.builder for c in self.nodes}

    @property
    def passed(self) -> bool:
        return all(c.comparison.passed for c in self.nodes) and all(c.passed for c in self.outputs)

    def table(self) -> str:
        head = f"{'max abs':>10} {'max rel':>10} {'mismatch':>9} {'size':>9}  tolerance"
        rows = [f"validation of '{self.graph}': {'PASS' if self.passed else 'FAIL'}"]
        rows.append(f"{'node (same inputs as the device)':<34} {'builder':<18} {head}")
        for check in self.nodes:
            rows.extend(_row(f"{check.node} -> {check.comparison.name}", check.builder, check.comparison))
        rows.append(f"{'output (end to end)':<34} {'dtype':<18} {head}")
        for c in self.outputs:
            rows.extend(_row(c.name, c.dtype, c))
        return "\n".join(rows)

    def to_json(self) -> str:
        return json.dumps(
            {
                "graph": self.graph,
                "passed": self.passed,
                "nodes": [{"node": c.node, "builder": c.builder, **c.comparison.as_dict()} for c in self.nodes],
                "outputs": [c.as_dict() for c in self.outputs],
            },
            indent=2,
        )


def _row(label: str, what: str, c: Comparison) -> list[str]:
    line = (
        f"{label:<34} {what:<18} {c.max_abs_error:>10.3g} {c.max_rel_error:>10.3g} "
        f"{c.mismatches + c.nan_inf_mismatches:>9} {c.size:>9}  {c.tolerance}"
    )
    if c.passed:
        return [line]
    return [line, f"    worst at {c.worst_index}: got {c.worst_got!r}, want {c.worst_want!r}"]


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


def _run_reference(
    graph: Graph,
    step: Step,
    plans: Mapping[str, Step],
    seen: Mapping[str, np.ndarray],
    upstream: Mapping[int, np.ndarray],
) -> tuple[dict[int, np.ndarray], dict[int, np.ndarray], dict[int, np.ndarray]]:
    """The reference's exit values for one device step, fed the entry tensors the device saw.

    Returns (values, sums, through). ``sums`` holds sum(|terms|) per element
    for each tensor downstream of a linear reduction (matmul, conv) inside
    the step, carried through elementwise nodes and data movement, so a
    fused epilogue keeps its GEMM's accumulation bound; the step's check
    uses it. ``through`` does the same from the graph's inputs on, seeded
    with ``upstream`` (the earlier steps' ``through``): the end-to-end check
    of an output downstream of a GEMM in another step needs that GEMM's
    bound, while the step check must not get it (it starts from the
    device's own entries).
    """
    values: dict[int, np.ndarray] = {}
    sums: dict[int, np.ndarray] = {}
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
        reference.plan.execute({**ins, **outs}, ExecutionContext())
        for port, uid in op.outputs().items():
            values[uid] = outs[port]
        if op.sums_absolute_terms:
            absolute_outs = {p: np.empty_like(a) for p, a in outs.items()}
            reference.plan.execute({**{p: np.abs(a) for p, a in ins.items()}, **absolute_outs}, ExecutionContext())
            for p, uid in op.outputs().items():
                sums[uid] = through[uid] = absolute_outs[p].astype(np.float64)
        elif op.elementwise():
            for table in (sums, through):
                carried = [table[uid] for uid in op.inputs().values() if uid in table]
                if carried:
                    for port, uid in op.outputs().items():
                        table[uid] = np.broadcast_to(sum(carried[1:], carried[0]), outs[port].shape)
        elif isinstance(op, MOVES_DATA):
            # Each output element is one input element: the op itself moves the bounds with the values
            # (the reference copies float64 into float64 as is; an input without a bound contributes 0).
            for table in (sums, through):
                carried = {p: table[uid] for p, uid in op.inputs().items() if uid in table}
                if carried:
                    moved = {p: np.empty(a.shape) for p, a in outs.items()}
                    bounds = {p: carried.get(p, np.zeros(a.shape)) for p, a in ins.items()}
                    reference.plan.execute({**bounds, **moved}, ExecutionContext())
                    table.update({uid: moved[p] for p, uid in op.outputs().items()})
        else:
            # A non-linear reduction (a norm, softmax, attention): no |terms| run exists, so its
            # accumulation bound is normwise, scaled by the output's largest magnitude.
            tensors = {p: graph.tensors[u] for p, u in op.ports().items()}
            for port, uid in op.outputs().items():
                if op.reduction_length(tensors, port) > 1:  # dims are >= 1: never empty
                    with np.errstate(invalid="ignore"):
                        scale = np.nanmax(np.abs(np.where(np.isfinite(outs[port]), outs[port], 0).astype(np.float64)))
                    sums[uid] = through[uid] = np.full(outs[port].shape, scale)
    return {uid: values[uid] for uid in step.writes}, sums, through


def compare_steps(
    graph: Graph,
    reference: ExecutionPlan,
    device: ExecutionPlan,
    seen: Mapping[str, np.ndarray],
    sums: dict[int, np.ndarray] | None = None,
) -> tuple[NodeCheck, ...]:
    """Each device step's exits against the reference recomputed from the step's own entries.

    A step is a node or a region; ``reference`` must plan node by node
    (fusion off). ``sums`` receives sum(|terms|) per element of every tensor
    downstream of a reduction, carried from step to step (for the
    end-to-end checks of the outputs).
    """
    plans = {s.node.name: s for s in reference.steps}
    sums = {} if sums is None else sums
    checks = []
    for step in device.steps:
        want, terms, through = _run_reference(graph, step, plans, seen, sums)
        sums.update(through)
        for uid, value in want.items():
            name = graph.tensors[uid].name
            tolerance = step_tolerance(graph, list(step.nodes), uid)
            comparison = compare(name, seen[name], value, tolerance, terms.get(uid))
            checks.append(NodeCheck(step.name, step.builder.name, comparison))
    return tuple(checks)


def validate(
    graph: Graph | bytes,
    inputs: Mapping[Any, np.ndarray] | None = None,
    seed: int = 0,
    *,
    backend: str = "gpu",
    executor: Executor | None = None,
) -> ValidationReport:
    """Run ``graph`` on ``backend`` (or ``executor``) and on the reference; compare node by node."""
    g = graph if isinstance(graph, Graph) else deserialize(graph)
    data: Mapping[Any, Any] = inputs if inputs is not None else random_inputs(g, seed)
    reference = Executor("reference", fusion=False)
    reference_plan = reference.prepare(g)
    want = reference.execute(reference_plan, data)
    device = executor or Executor(backend)
    device_plan = device.prepare(g)
    captured: dict[str, Any] = {}
    got = device.execute(device_plan, data, to_host=True, capture=captured)
    seen = {**_by_name(g, data), **captured}
    sums: dict[int, np.ndarray] = {}
    nodes = compare_steps(g, reference_plan, device_plan, seen, sums)
    outputs = tuple(
        compare(t.name, got[t.name], want[t.name], output_tolerance(g, t.uid), sums.get(t.uid)) for t in g.outputs
    )
    return ValidationReport(g.name, nodes, outputs)
