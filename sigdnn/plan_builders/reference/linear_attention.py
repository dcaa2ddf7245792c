"""Reference gated delta rule ops: gdn, gdn_bwd, kda, kda_bwd (math.delta_rule), token by token in float64."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.linear_attention import boundaries
from sigdnn.plan_builders.declines import decline_non_float
from sigdnn.plan_builders.reference.base import FloatReferenceBuilder
from sigdnn.plan_builders.reference.math.delta_rule import delta_rule, delta_rule_backward
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device

Compute = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


class _DeltaRuleReference(FloatReferenceBuilder):
    def check(self, node: Node, graph: Graph, device: Device) -> None:
        """Floating point apart from cu_seqlens."""
        decline_non_float(node, graph, integer_ports=("cu_seqlens",))

    @staticmethod
    def sequences(node: Node, graph: Graph, ins: dict[str, np.ndarray]) -> np.ndarray:
        name = graph.tensors[node.op.cu_seqlens].name
        return boundaries(f"node '{node.name}'", name, ins["cu_seqlens"], ins["q"].shape[0])

    @staticmethod
    def gate(node: Node, g: np.ndarray) -> np.ndarray:
        """g as [T, H, K]-broadcastable: a gdn gate [T, H] gets a unit key axis."""
        return g if node.op.per_channel_gate else g[..., None]


class _Forward(_DeltaRuleReference):
    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        op = node.op

        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            cu = self.sequences(node, graph, ins)
            o, final = delta_rule(
                ins["q"], ins["k"], ins["v"], self.gate(node, ins["g"]), ins["beta"], cu,
                ins.get("initial_state"), op.scale, op.use_qk_l2norm,
            )  # fmt: skip
            return {"o": o, "final_state": final} if op.output_final_state else {"o": o}

        return compute


class _Backward(_DeltaRuleReference):
    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        op = node.op

        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            cu = self.sequences(node, graph, ins)
            dq, dk, dv, dg, dbeta, d_initial = delta_rule_backward(
                ins["q"], ins["k"], ins["v"], self.gate(node, ins["g"]), ins["beta"], cu, ins.get("initial_state"),
                ins["d_o"], ins.get("d_final_state"), op.scale, op.use_qk_l2norm,
            )  # fmt: skip
            grads = {"dq": dq, "dk": dk, "dv": dv, "dg": dg if op.per_channel_gate else dg.sum(-1), "dbeta": dbeta}
            return {**grads, "d_initial_state": d_initial} if op.initial_state is not None else grads

        return compute


class ReferenceGdn(_Forward):
    name: ClassVar[str] = "reference.gdn"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("gdn",)


class ReferenceKda(_Forward):
    name: ClassVar[str] = "reference.kda"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("kda",)


class ReferenceGdnBwd(_Backward):
    name: ClassVar[str] = "reference.gdn_bwd"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("gdn_bwd",)


class ReferenceKdaBwd(_Backward):
    name: ClassVar[str] = "reference.kda_bwd"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("kda_bwd",)
