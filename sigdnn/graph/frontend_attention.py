"""The scaled dot-product attention methods of Graph's frontend (forward, backward), mixed into Frontend."""

from __future__ import annotations

from collections.abc import Mapping

from sigdnn.graph.arguments import DTypeLike, optional_integer
from sigdnn.graph.frontend_arguments import (
    parameter_value,
)
from sigdnn.graph.frontend_base import FrontendBase, Maybe, Scalar
from sigdnn.graph.ops.ragged import varlen_inputs
from sigdnn.graph.ops.sdpa import Sdpa
from sigdnn.graph.ops.sdpa_backward import SdpaBackward
from sigdnn.graph.tensor import Tensor


def band_attributes(where: str, bottom_right: bool, left_bound: object, right_bound: object) -> dict[str, object]:
    """The diagonal band's attributes (graph/ops/sdpa.py's ``Band``), their values checked as integers."""
    return {
        "diagonal_bottom_right": bool(bottom_right),
        "left_bound": optional_integer(left_bound, f"{where} left_bound"),
        "right_bound": optional_integer(right_bound, f"{where} right_bound"),
    }


class AttentionFrontend(FrontendBase):
    """Scaled dot-product attention forward and backward, dense or variable-length."""

    __slots__ = ()

    def sdpa(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        attn_scale: Scalar | None = None,
        bias: Maybe = None,
        use_causal_mask: bool = False,
        generate_stats: bool = False,
        *,
        seq_len_q: Maybe = None,
        seq_len_kv: Maybe = None,
        ragged_offsets: Mapping[str, Tensor] | None = None,
        diagonal_bottom_right: bool = False,
        left_bound: int | None = None,
        right_bound: int | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe]:
        """Scaled dot-product attention -> (o, stats).

        q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv], Hq a
        multiple of Hkv. Scores are attn_scale * q k^T (unscaled when None,
        as cuDNN) plus ``bias`` (broadcast to [B, Hq, Sq, Skv]); the causal
        mask keeps key j for query i when j <= i. stats [B, Hq, Sq, 1] (each
        row's logsumexp, float32 unless set) only with ``generate_stats``.
        ``seq_len_q`` / ``seq_len_kv`` ([B] int32 / int64) mask padding;
        ``ragged_offsets`` ({"q" | "k" | "v" | "o": [B + 1] offsets}) pack
        those tensors by token (docs/ops.md, "Variable-length attention").
        ``left_bound`` / ``right_bound`` keep key j for query i when
        i + a - left_bound < j <= i + a + right_bound, a = 0 or, with
        ``diagonal_bottom_right``, each sequence's Skv - Sq (the causal mask
        is the right bound 0; a left bound alone is a sliding window).
        """
        where = f"node '{name or 'sdpa'}'"
        attributes = {
            "attn_scale": 1.0 if attn_scale is None else parameter_value(attn_scale, f"{where} attn_scale"),
            "use_causal_mask": bool(use_causal_mask),
            "generate_stats": bool(generate_stats),
            **band_attributes(where, diagonal_bottom_right, left_bound, right_bound),
        }
        inputs = {"q": q, "k": k, "v": v, "bias": bias, **varlen_inputs(seq_len_q, seq_len_kv, ragged_offsets)}
        node = self.add_node(Sdpa, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def sdpa_backward(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        o: Tensor,
        d_o: Tensor,
        stats: Tensor,
        attn_scale: Scalar | None = None,
        bias: Maybe = None,
        use_causal_mask: bool = False,
        *,
        seq_len_q: Maybe = None,
        seq_len_kv: Maybe = None,
        ragged_offsets: Mapping[str, Tensor] | None = None,
        diagonal_bottom_right: bool = False,
        left_bound: int | None = None,
        right_bound: int | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Attention gradients from the forward's o and stats and the incoming d_o (cuDNN's dO) -> (dq, dk, dv).

        Variable lengths and the band as ``sdpa``'s; dq, dk, dv and d_o follow q, k, v and o's ragged offsets.
        """
        where = f"node '{name or 'sdpa_backward'}'"
        attributes = {
            "attn_scale": 1.0 if attn_scale is None else parameter_value(attn_scale, f"{where} attn_scale"),
            "use_causal_mask": bool(use_causal_mask),
            **band_attributes(where, diagonal_bottom_right, left_bound, right_bound),
        }
        inputs = {"q": q, "k": k, "v": v, "o": o, "d_o": d_o, "stats": stats, "bias": bias}
        inputs.update(varlen_inputs(seq_len_q, seq_len_kv, ragged_offsets))
        node = self.add_node(SdpaBackward, inputs, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]
