"""ExecutionPlan: what prepare() produces and execute() runs."""

from __future__ import annotations

import attrs

from sigdnn.executor.memory_plan import MemoryPlan
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.registry.contracts import NodePlan, PlanBuilder
from sigdnn.signature_keys import SignatureKey


@attrs.frozen
class Step:
    node: Node
    key: SignatureKey
    builder: PlanBuilder
    plan: NodePlan
    ports: dict[str, int]  # port -> tensor uid


@attrs.frozen
class ExecutionPlan:
    graph: Graph
    backend: str
    digest: str
    steps: tuple[Step, ...]
    memory: MemoryPlan
    declines: dict[str, list[str]] = attrs.field(factory=dict)  # node -> why builders declined

    @property
    def peak_intermediate_bytes(self) -> int:
        return self.memory.peak_bytes

    @property
    def workspace_bytes(self) -> int:
        return max((s.plan.workspace_bytes for s in self.steps), default=0)

    def describe(self) -> str:
        """A readable summary: tensors, steps with keys and builders, memory."""
        g = self.graph
        lines = [f"graph '{g.name}': {len(g.tensors)} tensors, {len(g.nodes)} nodes, backend {self.backend}"]
        lines.append("tensors:")
        for t in g.tensors.values():
            kind = "virtual" if t.is_virtual else "scalar" if t.value is not None else "io"
            lines.append(
                f"  {t.uid:>4} {t.name:<28} {g.dtype_of(t).short:<5} dims={list(t.dims)} strides={list(t.strides)} {kind}"
            )
        lines.append("execution order:")
        for n, s in enumerate(self.steps):
            lines.append(f"  {n:>4} {s.node.name:<28} {s.key!s:<44} -> {s.builder.name} (#{s.builder.engine_id})")
        m = self.memory
        lines.append(
            f"peak intermediate memory: {m.peak_bytes} bytes (without reuse: {m.total_bytes}); workspace: {self.workspace_bytes} bytes"
        )
        return "\n".join(lines)
