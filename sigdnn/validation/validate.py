"""validate(): the same graph and inputs through the reference and a device backend.

The verdict is taken node by node: the device run captures every tensor a
node writes, and the reference recomputes each node from the device's own
inputs for that node, so one wrong kernel shows up at its node with a tight
tolerance instead of being blurred by the errors that pile up along a chain.
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
from sigdnn.graph.ops import ConvFprop, Matmul
from sigdnn.validation.compare import Comparison, compare
from sigdnn.validation.inputs import random_inputs
from sigdnn.validation.tolerances import node_tolerance, output_tolerance


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
    """Host arrays of the inputs keyed by tensor name (keys may be uids), plus graph scalars."""
    values = {}
    for key, value in data.items():
        name = key if isinstance(key, str) else graph.tensors[int(key)].name
        values[name] = np.asarray(value)
    for t in graph.tensors.values():
        if t.value is not None and t.name not in values:
            values[t.name] = np.full(t.dims, t.scalar())
    return values


def _recompute(
    graph: Graph, step: Step, seen: Mapping[str, np.ndarray], absolute: bool = False
) -> dict[int, np.ndarray]:
    """The reference's result for one node, fed the tensors the device saw."""
    outputs = step.node.op.outputs()
    buffers: dict[str, np.ndarray] = {}
    for port, uid in step.ports.items():
        t = graph.tensors[uid]
        dtype = graph.dtype_of(t).numpy
        if port in outputs:
            buffers[port] = np.empty(t.dims, dtype=dtype)
        else:
            value = np.asarray(seen[t.name], dtype=dtype)
            buffers[port] = np.abs(value) if absolute else value
    step.plan.execute(buffers, None)
    return {uid: buffers[port] for port, uid in outputs.items()}


def compare_nodes(
    graph: Graph,
    reference: ExecutionPlan,
    device: ExecutionPlan,
    seen: Mapping[str, np.ndarray],
    sums: dict[int, np.ndarray] | None = None,
) -> tuple[NodeCheck, ...]:
    """Each node's device result against the reference recomputed from the device's inputs.

    ``sums`` receives sum(|terms|) per element of every reduction's output.
    """
    builders = {s.node.name: s.builder.name for s in device.steps}
    sums = {} if sums is None else sums
    checks = []
    for step in reference.steps:
        want = _recompute(graph, step, seen)
        reduces = isinstance(step.node.op, (Matmul, ConvFprop))
        terms = _recompute(graph, step, seen, absolute=True) if reduces else {}
        sums.update(terms)
        for uid, value in want.items():
            name = graph.tensors[uid].name
            tolerance = node_tolerance(graph, step.node, uid)
            comparison = compare(name, seen[name], value, tolerance, terms.get(uid))
            checks.append(NodeCheck(step.node.name, builders[step.node.name], comparison))
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
    reference = Executor("reference")
    reference_plan = reference.prepare(g)
    want = reference.execute(reference_plan, data)
    device = executor or Executor(backend)
    device_plan = device.prepare(g)
    captured: dict[str, Any] = {}
    got = device.execute(device_plan, data, to_host=True, capture=captured)
    seen = {**_by_name(g, data), **captured}
    sums: dict[int, np.ndarray] = {}
    nodes = compare_nodes(g, reference_plan, device_plan, seen, sums)
    outputs = tuple(
        compare(t.name, got[t.name], want[t.name], output_tolerance(g, t.uid), sums.get(t.uid)) for t in g.outputs
    )
    return ValidationReport(g.name, nodes, outputs)
