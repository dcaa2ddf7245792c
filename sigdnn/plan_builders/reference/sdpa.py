"""Reference scaled dot-product attention, forward and backward (math.sdpa), with variable lengths.

Ragged tensors (graph/ops/ragged.py) are unpacked into the padded [B, H, S, E]
form the math takes, and ragged outputs packed back: the math itself only
sees padding masks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops import ragged
from sigdnn.graph.ops.sdpa import VARLEN_PORTS, Band, Sdpa
from sigdnn.graph.ops.sdpa_backward import SdpaBackward
from sigdnn.plan_builders.declines import decline_non_float
from sigdnn.plan_builders.reference import math
from sigdnn.plan_builders.reference.base import FloatReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device

Compute = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


class _Varlen:
    """One run's sequence lengths and ragged placements for a node; unpacks inputs and packs outputs."""

    def __init__(self, node: Node, graph: Graph, ins: Mapping[str, np.ndarray]) -> None:
        self.lengths, self.places = ragged.layout(f"node '{node.name}'", node.op, graph.tensors, ins)

    def unpack(self, ins: Mapping[str, np.ndarray], port: str) -> np.ndarray:
        value = ins[port]
        if port not in self.places:
            return value
        return ragged.unpack(value, *self.places[port])

    def pack(self, port: str, value: np.ndarray) -> np.ndarray:
        return value if port not in self.places else ragged.pack(value, *self.places[port])


class _VarlenReference(FloatReferenceBuilder):
    def check(self, node: Node, graph: Graph, device: Device) -> None:
        """Floating point apart from the integer length and offset ports."""
        decline_non_float(node, graph, integer_ports=VARLEN_PORTS)


class ReferenceSdpa(_VarlenReference):
    name: ClassVar[str] = "reference.sdpa"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("sdpa",)

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        op: Sdpa = node.op

        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            run = _Varlen(node, graph, ins)
            q, k, v = (run.unpack(ins, p) for p in ("q", "k", "v"))
            o, stats = math.sdpa(
                q, k, v, op.attn_scale, ins.get("bias"), generate_stats=op.generate_stats,
                seq_len_q=run.lengths["seq_len_q"], seq_len_kv=run.lengths["seq_len_kv"], band=Band.of(op),
            )  # fmt: skip
            out = {"o": run.pack("o", o)}
            return {**out, "stats": stats} if stats is not None else out

        return compute


class ReferenceSdpaBackward(_VarlenReference):
    name: ClassVar[str] = "reference.sdpa_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("sdpa_backward",)

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        op: SdpaBackward = node.op

        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            run = _Varlen(node, graph, ins)
            tensors = (run.unpack(ins, p) for p in ("q", "k", "v", "o", "d_o"))
            dq, dk, dv = math.sdpa_backward(
                *tensors, ins["stats"], op.attn_scale, ins.get("bias"),
                seq_len_q=run.lengths["seq_len_q"], seq_len_kv=run.lengths["seq_len_kv"], band=Band.of(op),
            )  # fmt: skip
            return {"dq": run.pack("dq", dq), "dk": run.pack("dk", dk), "dv": run.pack("dv", dv)}

        return compute
