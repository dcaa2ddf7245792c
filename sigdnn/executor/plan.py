"""ExecutionPlan and Step: what prepare() produces and execute() runs.

A step is one node or one region (several nodes a fusion builder runs as
one). Its ``bindings`` map the keys its step plan reads buffers by (port
names for a node, tensor uids for a region) to tensor uids; ``reads`` and
``writes`` are the tensors that cross its boundary.
"""

from __future__ import annotations

from typing import Any

import attrs

from sigdnn.dtypes import DataType
from sigdnn.executor.memory_plan import MemoryPlan
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor
from sigdnn.registry.contracts import PlanBuilder, StepPlan
from sigdnn.registry.regions import Region
from sigdnn.signature_keys import SignatureKey


@attrs.frozen
class Step:
    name: str  # the node's name, or "region(first..last)"
    nodes: tuple[Node, ...]  # in execution order
    keys: tuple[SignatureKey, ...]  # one per node
    builder: PlanBuilder
    plan: StepPlan
    bindings: dict[Any, int]  # port (node) or uid (region) -> tensor uid
    reads: tuple[int, ...]  # uids read from outside the step
    writes: tuple[int, ...]  # uids written and visible outside the step
    region: Region | None = None
    declines: tuple[str, ...] = ()  # why better-ranked builders declined
    choice: str | None = None  # how the builder was chosen among several (autotune.Choice.summary)
    candidates: tuple[Any, ...] = ()  # every autotune.Candidate that accepted the step, best first
    chosen: int = 0  # which of them this step built (earlier ones declined to build)

    @property
    def node(self) -> Node:
        """The step's node (for a region: its first)."""
        return self.nodes[0]

    @property
    def key(self) -> SignatureKey:
        return self.keys[0]


@attrs.frozen
class PlanTensors:
    """What execute() needs of the graph's tensors, worked out once per plan instead of on every call."""

    inputs: tuple[int, ...]  # uids the caller must give
    outputs: tuple[int, ...]  # uids of the graph's outputs, in graph order
    output_names: tuple[str, ...]
    writable: frozenset[int]  # the outputs, for membership tests
    names: dict[str, int]  # tensor name -> uid, for the variant pack
    dtypes: dict[int, DataType]  # every non-virtual tensor's dtype
    others: tuple[tuple[int, Tensor, DataType], ...]  # non-virtual tensors the caller may leave out

    @classmethod
    def of(cls, graph: Graph) -> PlanTensors:
        inputs = tuple(t.uid for t in graph.inputs)
        outputs = tuple(t.uid for t in graph.outputs)
        dtypes = {uid: graph.dtype_of(t) for uid, t in graph.tensors.items() if not t.is_virtual}
        required = set(inputs)
        others = tuple((uid, graph.tensors[uid], dtype) for uid, dtype in dtypes.items() if uid not in required)
        names = {t.name: uid for uid, t in graph.tensors.items()}
        output_names = tuple(graph.tensors[u].name for u in outputs)
        return cls(inputs, outputs, output_names, frozenset(outputs), names, dtypes, others)


@attrs.frozen
class ExecutionPlan:
    graph: Graph
    backend: str
    digest: str
    steps: tuple[Step, ...]
    memory: MemoryPlan
    arena_tensors: tuple[tuple[int, int, Tensor, DataType], ...] = ()  # (uid, offset, tensor, dtype), resolved once
    tensors: PlanTensors = attrs.field(init=False, eq=False, repr=False)
    workspace_bytes: int = attrs.field(init=False, eq=False, repr=False)
    # arena views and workspace a finished host run left for the next (memory that keeps them: HostMemory)
    spare_scratch: list[tuple[dict[int, Any], Any]] = attrs.field(init=False, factory=list, eq=False, repr=False)

    @tensors.default
    def _tensors(self) -> PlanTensors:
        return PlanTensors.of(self.graph)

    @workspace_bytes.default
    def _workspace_bytes(self) -> int:
        return max((s.plan.workspace_bytes for s in self.steps), default=0)

    @property
    def peak_intermediate_bytes(self) -> int:
        return self.memory.peak_bytes

    @property
    def candidates(self) -> tuple[tuple[Any, ...], ...]:
        """Per step, every autotune.Candidate that accepted it, best first (``plan_list`` flattens them)."""
        return tuple(s.candidates for s in self.steps)

    @property
    def regions(self) -> tuple[Step, ...]:
        return tuple(s for s in self.steps if s.region is not None)

    def as_dict(self) -> dict[str, Any]:
        """The plan as plain data (what ``sigdnn inspect --json`` prints)."""
        g = self.graph
        return {
            "graph": g.name,
            "backend": self.backend,
            "tensors": [
                {
                    "uid": t.uid,
                    "name": t.name,
                    "dtype": str(g.dtype_of(t)),
                    "dims": list(t.dims),
                    "strides": list(t.strides),
                    "kind": t.kind,
                }
                for t in g.tensors.values()
            ],
            "steps": [
                {
                    "name": s.name,
                    "nodes": [n.name for n in s.nodes],
                    "keys": [str(k) for k in s.keys],
                    "builder": s.builder.name,
                    "engine_id": s.builder.engine_id,
                    "region": s.region is not None,
                    "declines": list(s.declines),
                    "choice": s.choice,
                }
                for s in self.steps
            ],
            "memory": {
                "peak_intermediate_bytes": self.memory.peak_bytes,
                "intermediate_bytes_without_reuse": self.memory.total_bytes,
                "workspace_bytes": self.workspace_bytes,
                "intermediates_in_outputs": {
                    self.graph.tensors[uid].name: self.graph.tensors[host].name
                    for uid, (host, _) in self.memory.hosted.items()
                },
            },
        }

    def describe(self) -> str:
        """A readable summary: tensors, steps with keys and builders, memory."""
        g = self.graph
        lines = [f"graph '{g.name}': {len(g.tensors)} tensors, {len(g.nodes)} nodes, backend {self.backend}"]
        lines.append("tensors:")
        for t in g.tensors.values():
            lines.append(
                f"  {t.uid:>4} {t.name:<28} {g.dtype_of(t).short:<5} dims={list(t.dims)} strides={list(t.strides)} {t.kind}"
            )
        lines.append("execution order:")
        for n, s in enumerate(self.steps):
            builder = f"{s.builder.name} (#{s.builder.engine_id})"
            if getattr(s.plan, "launches", None) == 0:
                builder = f"{s.builder.name} (0 launches: {', '.join(self._aliased(s))})"
            if s.region is None:
                lines.append(f"  {n:>4} {s.name:<28} {s.key!s:<44} -> {builder}")
            else:
                lines.append(f"  {n:>4} {s.name:<28} {'region of ' + str(len(s.nodes)) + ' nodes':<44} -> {builder}")
                lines.extend(f"       - {node.name:<26} {key!s}" for node, key in zip(s.nodes, s.keys))
            if s.choice:
                lines.append(f"       chosen by {s.choice}")
        m = self.memory
        lines.append(
            f"peak intermediate memory: {m.peak_bytes} bytes (without reuse: {m.total_bytes}); "
            f"workspace: {self.workspace_bytes} bytes" + (f"; {len(m.roots)} views" if m.roots else "")
        )
        if m.hosted:
            guests = ", ".join(f"{g.tensors[u].name} in {g.tensors[h].name}" for u, (h, _) in m.hosted.items())
            lines.append(f"intermediates in outputs not yet written: {guests}")
        return "\n".join(lines)

    def _aliased(self, step: Step) -> list[str]:
        """What a view step aliases: its pieces for a concatenate, else its output ('a in b': a's bytes are in b's)."""
        g, roots = self.graph, self.memory.roots
        aliased = step.reads if step.node.op.kind == "concatenate" else step.writes
        return [f"{g.tensors[u].name} in {g.tensors[roots[u]].name}" for u in aliased if u in roots]
