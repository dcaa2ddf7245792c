"""sdpa_backward: dq, dk, dv from q, k, v, the forward's o and stats, and d_o (cuDNN's dO).

Shapes and attributes as sdpa's (sdpa.py); o and d_o are [B, Hq, Sq, Dv],
stats [B, Hq, Sq, 1]. dk and dv sum over the query heads that share each
kv head.

Variable lengths as sdpa's: the padding masks, and ragged offsets for q,
k, v and o that also place dq, dk, dv and d_o. Gradients at positions
outside a sequence are unspecified (the reference writes 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs
import numpy as np

from sigdnn.errors import GraphError
from sigdnn.graph.limits import Limits
from sigdnn.graph.ops import ragged
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.sdpa import (
    BAND_FIELDS,
    RAGGED_LENGTHS,
    VARLEN_FIELDS,
    VARLEN_PORTS,
    attention_dims,
    block_scores,
    check_band,
    varlen_copy_bytes,
    varlen_traits,
)
from sigdnn.graph.ops.shapes import packed_in_order_of, require_dims
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class SdpaBackward(Op):
    kind: ClassVar[str] = "sdpa_backward"
    table: ClassVar[str] = "SdpaBackwardAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("q", "k", "v", "o", "d_o", "stats", "bias", *VARLEN_PORTS)
    output_ports: ClassVar[tuple[str, ...]] = ("dq", "dk", "dv")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("q", "uid"),
        ("k", "uid"),
        ("v", "uid"),
        ("o", "uid"),
        ("d_o", "uid"),
        ("stats", "uid"),
        ("bias", "uid?"),
        ("dq", "uid"),
        ("dk", "uid"),
        ("dv", "uid"),
        ("attn_scale", "f64"),
        ("use_causal_mask", "bool"),
        *VARLEN_FIELDS,
        *BAND_FIELDS,
    )
    key_attributes: ClassVar[tuple[str, ...]] = (
        "use_causal_mask",
        "diagonal_bottom_right",
        "left_bound",
        "right_bound",
    )
    # p (for dv) and ds (for dq and dk) go to the tensor cores in q's dtype on flash-attention kernels.
    rounded_operands: ClassVar[Mapping[str, str]] = {"dq": "q", "dk": "q", "dv": "q"}
    score_operands: ClassVar[tuple[str, ...]] = ("q", "k")

    q: int
    k: int
    v: int
    o: int
    d_o: int
    stats: int
    dq: int
    dk: int
    dv: int
    attn_scale: float
    bias: int | None = None
    use_causal_mask: bool = False
    seq_len_q: int | None = None
    seq_len_kv: int | None = None
    q_ragged_offset: int | None = None
    k_ragged_offset: int | None = None
    v_ragged_offset: int | None = None
    o_ragged_offset: int | None = None
    diagonal_bottom_right: bool = False
    left_bound: int | None = None
    right_bound: int | None = None

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """dq sums over keys; dk and dv over the query rows of every head sharing them."""
        q, k = tensors["q"], tensors["k"]
        if port == "dq":
            return max(k.dims[2], q.dims[3])
        return max(q.dims[2] * (q.dims[1] // k.dims[1]), q.dims[3])

    def score_terms(self, tensors: Mapping[str, Tensor]) -> int:
        return tensors["q"].dims[3]

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """Recomputed scores plus four products over every (query, key) pair."""
        q, k, v = tensors["q"], tensors["k"], tensors["v"]
        pairs = q.dims[0] * q.dims[1] * q.dims[2] * k.dims[2]
        return pairs * (3 * q.dims[3] + 2 * v.dims[3]) + q.size

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        q = inputs["q"]
        where = f"sdpa_backward(q='{q.name}')"
        b, hq, sq, _, dv = attention_dims(where, inputs, self.attn_scale)
        for port in ("o", "d_o"):
            require_dims(where, port, inputs[port], (b, hq, sq, dv), "the forward's o")
        require_dims(where, "stats", inputs["stats"], (b, hq, sq, 1), "one logsumexp per query row")
        return {"dq": q.dims, "dk": inputs["k"].dims, "dv": inputs["v"].dims}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        where = f"sdpa_backward '{outputs['dq'].name}'"
        require_float(where, {p: t for p, t in {**inputs, **outputs}.items() if p not in VARLEN_PORTS})
        check_band(where, self)
        placed = {"q": inputs["q"], "k": inputs["k"], "v": inputs["v"], "o": inputs["o"]}
        ragged.check_varlen(where, inputs, placed, RAGGED_LENGTHS)
        ragged.check_constant_places(where, {**inputs, **outputs}, outputs, RAGGED_LENGTHS)
        for grad, port in ragged.GRADIENT_OF.items():
            t = {**inputs, **outputs}[grad]
            if getattr(self, port + ragged.OFFSET_SUFFIX) is not None and t.strides != inputs[port].strides:
                raise GraphError(
                    f"{where}: ragged port '{grad}' (tensor '{t.name}') has strides {list(t.strides)}; it shares "
                    f"{port}'s ragged offsets, so it needs {port}'s strides {list(inputs[port].strides)}"
                )

    def key_traits(self, tensors: Mapping[str, Tensor]) -> tuple[tuple[str, Any], ...]:
        return (*super().key_traits(tensors), *varlen_traits(self))

    def unspecified(self, values: Mapping[str, np.ndarray], tensors: Mapping[str, Tensor]) -> dict[str, np.ndarray]:
        placement = {"dq": ("q", "seq_len_q"), "dk": ("k", "seq_len_kv"), "dv": ("v", "seq_len_kv")}
        return ragged.unspecified_outputs(values, tensors, placement)

    def random_inputs(
        self, tensors: Mapping[str, Tensor], rng: np.random.Generator, given: Mapping[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        return ragged.random_varlen(tensors, rng, RAGGED_LENGTHS, given)

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """The reference's float64 score blocks (p, dp / ds, the products) and its unpacked copies."""
        return 4 * 8 * block_scores(inputs["k"].dims[2]) + varlen_copy_bytes(self, inputs)

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """Each gradient in its forward tensor's layout (BSHD stays BSHD)."""
        return packed_in_order_of(inputs[port[1:]], dims)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        q, k, v = graph.tensor("q", (1, 4, 5, 8)), graph.tensor("k", (1, 2, 7, 8)), graph.tensor("v", (1, 2, 7, 3))
        o, d_o, stats = (
            graph.tensor("o", (1, 4, 5, 3)),
            graph.tensor("d_o", (1, 4, 5, 3)),
            graph.tensor("stats", (1, 4, 5, 1)),
        )
        for t in graph.sdpa_backward(q, k, v, o, d_o, stats, 0.35, use_causal_mask=True, name="sdpa_backward"):
            t.set_output(True)
        return graph.nodes[-1]
