"""Reference scaled dot-product attention, forward and backward (math.sdpa)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.sdpa import Sdpa
from sigdnn.graph.ops.sdpa_backward import SdpaBackward
from sigdnn.plan_builders.reference import math
from sigdnn.plan_builders.reference.base import FloatReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE

Compute = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


class ReferenceSdpa(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.sdpa"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("sdpa",)

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        op: Sdpa = node.op

        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            o, stats = math.sdpa(
                ins["q"], ins["k"], ins["v"], op.attn_scale, ins.get("bias"), op.use_causal_mask, op.generate_stats
            )
            return {"o": o, "stats": stats} if stats is not None else {"o": o}

        return compute


class ReferenceSdpaBackward(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.sdpa_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("sdpa_backward",)

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        op: SdpaBackward = node.op

        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            tensors = (ins[p] for p in ("q", "k", "v", "o", "d_o", "stats"))
            dq, dk, dv = math.sdpa_backward(*tensors, op.attn_scale, ins.get("bias"), op.use_causal_mask)
            return {"dq": dq, "dk": dk, "dv": dv}

        return compute
