"""gdn: Gated DeltaNet forward over token-packed sequences (linear_attention.py has the recurrence).

One decay per token and head (g [T, H]); o [T, H, V]; final_state
[N, H, K, V] exactly when ``output_final_state`` is set (the initial
state's dtype, float32 without one).
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
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class Gdn(Op):
    kind: ClassVar[str] = "gdn"
    table: ClassVar[str] = "GdnAttributes"
    per_channel_gate: ClassVar[bool] = False
    input_ports: ClassVar[tuple[str, ...]] = ("q", "k", "v", "g", "beta", "cu_seqlens", "initial_state")
    output_ports: ClassVar[tuple[str, ...]] = ("o", "final_state")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("q", "uid"),
        ("k", "uid"),
        ("v", "uid"),
        ("g", "uid"),
        ("beta", "uid"),
        ("cu_seqlens", "uid"),
        ("initial_state", "uid?"),
        ("o", "uid"),
        ("final_state", "uid?"),
        ("scale", "f64?"),
        ("use_qk_l2norm", "bool"),
        ("output_final_state", "bool"),
    )
    key_attributes: ClassVar[tuple[str, ...]] = ("use_qk_l2norm",)
    float32_sums: ClassVar[bool] = True  # the compute dtype rounds products' operands (docs/ops.md)

    q: int
    k: int
    v: int
    g: int
    beta: int
    cu_seqlens: int
    o: int
    initial_state: int | None = None
    final_state: int | None = None
    scale: float | None = None
    use_qk_l2norm: bool = False
    output_final_state: bool = False

    def where(self, inputs: Mapping[str, Tensor]) -> str:
        return f"{self.kind}(q='{inputs['q'].name}')"

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        tokens, heads, kd, vd, n = la.problem_dims(self.where(inputs), inputs, self.per_channel_gate)
        dims = {"o": (tokens, heads, vd)}
        if self.output_final_state:
            dims["final_state"] = (n, heads, kd, vd)
        return dims

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        la.check_dtypes(self.where(inputs), {**inputs, **outputs})
        la.check_scale(self.where(inputs), self.scale)

    def output_dtype(self, port: str, inputs: Mapping[str, Tensor]) -> DataType | None:
        return la.dtype_of(port, inputs)

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """Per token and head: decay, two state-vector products and the rank-1 update of the [K, V] state."""
        return la.token_work(tensors, 8)

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """The state sums over a sequence's tokens; each output reads it against K channels."""
        return max(tensors["q"].dims[0], tensors["q"].dims[2])

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        return la.STATE_COPIES * la.state_bytes(inputs)

    def random_inputs(
        self, tensors: Mapping[str, Tensor], rng: np.random.Generator, given: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        # each port's draw stands alone: nothing in given to agree with
        return la.random_draw(tensors, rng, self.use_qk_l2norm)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        ins = la.sample_inputs(graph, cls.per_channel_gate)
        build = getattr(graph, cls.kind)
        o, final = build(**ins, scale=0.7, use_qk_l2norm=True, output_final_state=True, name=cls.kind)
        o.set_output(True)
        final.set_output(True)
        return graph.nodes[-1]
