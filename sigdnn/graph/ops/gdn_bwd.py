"""gdn_bwd: Gated DeltaNet's gradients by reverse mode through the recurrence (linear_attention.py).

Inputs: the forward's (q, k, v, g, beta, cu_seqlens, initial_state), d_o
[T, H, V] and optionally d_final_state [N, H, K, V] (zero when absent).
Outputs dq, dk, dv, dg (g's dims), dbeta and d_initial_state, the last
exactly when an initial state is given. Gradients take their forward
tensor's dtype unless set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs
import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.graph.limits import Limits
from sigdnn.graph.ops import linear_attention as la
from sigdnn.graph.ops.base import Op
from sigdnn.graph.ops.shapes import require_dims
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node

GRADIENTS = {"dq": "q", "dk": "k", "dv": "v", "dg": "g", "dbeta": "beta", "d_initial_state": "initial_state"}


@attrs.frozen
class GdnBwd(Op):
    kind: ClassVar[str] = "gdn_bwd"
    table: ClassVar[str] = "GdnBackwardAttributes"
    per_channel_gate: ClassVar[bool] = False
    input_ports: ClassVar[tuple[str, ...]] = (
        "q", "k", "v", "g", "beta", "cu_seqlens", "initial_state", "d_o", "d_final_state",
    )  # fmt: skip
    output_ports: ClassVar[tuple[str, ...]] = ("dq", "dk", "dv", "dg", "dbeta", "d_initial_state")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("q", "uid"),
        ("k", "uid"),
        ("v", "uid"),
        ("g", "uid"),
        ("beta", "uid"),
        ("cu_seqlens", "uid"),
        ("initial_state", "uid?"),
        ("d_o", "uid"),
        ("d_final_state", "uid?"),
        ("dq", "uid"),
        ("dk", "uid"),
        ("dv", "uid"),
        ("dg", "uid"),
        ("dbeta", "uid"),
        ("d_initial_state", "uid?"),
        ("scale", "f64?"),
        ("use_qk_l2norm", "bool"),
    )
    key_attributes: ClassVar[tuple[str, ...]] = ("use_qk_l2norm",)
    float32_sums: ClassVar[bool] = True  # the compute dtype rounds products' operands (docs/ops.md)

    q: int
    k: int
    v: int
    g: int
    beta: int
    cu_seqlens: int
    d_o: int
    dq: int
    dk: int
    dv: int
    dg: int
    dbeta: int
    initial_state: int | None = None
    d_final_state: int | None = None
    d_initial_state: int | None = None
    scale: float | None = None
    use_qk_l2norm: bool = False

    def where(self, inputs: Mapping[str, Tensor]) -> str:
        return f"{self.kind}(q='{inputs['q'].name}')"

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        where = self.where(inputs)
        tokens, heads, _, vd, _ = la.problem_dims(where, inputs, self.per_channel_gate)
        require_dims(where, "d_o", inputs["d_o"], (tokens, heads, vd), "the forward's o")
        return {grad: inputs[port].dims for grad, port in GRADIENTS.items() if port in inputs}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        la.check_dtypes(self.where(inputs), {**inputs, **outputs})
        la.check_scale(self.where(inputs), self.scale)

    def output_dtype(self, port: str, inputs: Mapping[str, Tensor]) -> DataType | None:
        return inputs[GRADIENTS[port]].dtype

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """The forward recomputed twice (checkpoints, then each segment) and about three times its work backward."""
        return la.token_work(tensors, 40)

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """Each gradient sums over the later tokens of its sequence and over K or V channels."""
        q, v = tensors["q"], tensors["v"]
        return max(q.dims[0], q.dims[2], v.dims[2])

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """Checkpointed states of the longest possible sequence (T tokens), one sequence at a time."""
        tokens, heads, kd = inputs["q"].dims
        one = 8 * heads * kd * inputs["v"].dims[2]
        return (la.checkpoints(tokens) + la.STATE_COPIES) * one + la.state_bytes(inputs)

    def random_inputs(
        self, tensors: Mapping[str, Tensor], rng: np.random.Generator, given: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        # each port's draw stands alone: nothing in given to agree with
        return la.random_draw(tensors, rng, self.use_qk_l2norm)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        ins = la.sample_inputs(graph, cls.per_channel_gate)
        ins["d_o"] = graph.tensor("d_o", (5, 2, 2))
        ins["d_final_state"] = graph.tensor("d_final", (2, 2, 3, 2), dtype="float32")
        for t in getattr(graph, cls.kind)(**ins, scale=0.7, use_qk_l2norm=True, name=cls.kind):
            t.set_output(True)
        return graph.nodes[-1]
