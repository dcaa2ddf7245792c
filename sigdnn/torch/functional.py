"""torch.nn.functional-shaped entry points over the sigdnn ops, and a switch that routes a model's attention here."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from sigdnn.errors import UsageError
from sigdnn.torch import delta_rule, ops, varlen


def scaled_dot_product_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0,
                                 is_causal: bool = False, scale: float | None = None,
                                 enable_gqa: bool = False) -> torch.Tensor:  # fmt: skip
    """torch's scaled_dot_product_attention on sigdnn (q [..., H, S, D]); masks and dropout are not supported."""
    if attn_mask is not None:
        raise NotImplementedError("sigdnn.torch.scaled_dot_product_attention(attn_mask=...): not supported")
    if dropout_p:
        raise NotImplementedError("sigdnn.torch.scaled_dot_product_attention(dropout_p > 0): not supported")
    if query.shape[-3] != key.shape[-3] and not enable_gqa:
        raise ValueError("query and key have different head counts: pass enable_gqa=True, as torch requires")
    if query.dim() != 4:
        raise NotImplementedError(f"sigdnn.torch.scaled_dot_product_attention: 4-d q [B, H, S, D], got {query.dim()}-d")
    factor = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    o, _ = ops.sdpa(query, key, value, factor, bool(is_causal))
    return o


def layer_norm(input: torch.Tensor, normalized_shape: Sequence[int], weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5) -> torch.Tensor:  # fmt: skip
    """torch's layer_norm on sigdnn (weight and bias default to ones and zeros)."""
    shape = tuple(normalized_shape)
    weight = torch.ones(shape, dtype=input.dtype, device=input.device) if weight is None else weight
    bias = torch.zeros(shape, dtype=input.dtype, device=input.device) if bias is None else bias
    y, _, _ = ops.layer_norm(input, weight, bias, float(eps))
    return y


def conv(input: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, stride: int | Sequence[int] = 1,
         padding: int | Sequence[int] = 0, dilation: int | Sequence[int] = 1, groups: int = 1) -> torch.Tensor:  # fmt: skip
    """torch's conv1d / conv2d / conv3d on sigdnn (numeric padding, no groups); the bias is added by torch."""
    if groups != 1:
        raise NotImplementedError("sigdnn.torch.conv(groups != 1): not supported")
    spatial = input.dim() - 2

    def each(v: int | Sequence[int]) -> list[int]:
        return [int(v)] * spatial if isinstance(v, int) else [int(e) for e in v]

    y = ops.conv(input, weight, each(stride), each(padding), each(dilation))
    return y if bias is None else y + bias.reshape(1, -1, *([1] * spatial))


def _delta_rule(kind: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                scale: float | None, initial_state: torch.Tensor | None, output_final_state: bool,
                cu_seqlens: torch.Tensor | None, l2norm: bool) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """flash-linear-attention's [B, T, H, D] batch on sigdnn's token-packed op: B sequences of T, or cu_seqlens's."""
    if q.dim() != 4:
        raise UsageError(f"sigdnn.torch.{kind}: q is [B, T, H, K], got dims {list(q.shape)}")
    batch, tokens = q.shape[:2]
    if cu_seqlens is None:
        cu_seqlens = torch.arange(0, (batch + 1) * tokens, tokens, dtype=torch.int32, device=q.device)
    elif batch != 1:
        raise UsageError(
            f"sigdnn.torch.{kind}: with cu_seqlens, q's batch is 1 (sequences packed along T), got {batch}"
        )

    def packed(t: torch.Tensor) -> torch.Tensor:
        return t.reshape(batch * tokens, *t.shape[2:])

    op = getattr(delta_rule, kind)
    o, final = op(*map(packed, (q, k, v, g, beta)), cu_seqlens, initial_state, scale, l2norm, output_final_state)
    return o.reshape(batch, tokens, *o.shape[1:]), final


def chunk_gated_delta_rule(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
                           scale: float | None = None, initial_state: torch.Tensor | None = None,
                           output_final_state: bool = False, cu_seqlens: torch.Tensor | None = None,
                           use_qk_l2norm_in_kernel: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """flash-linear-attention's chunk_gated_delta_rule on sigdnn's gdn: q, k [B, T, H, K], v [B, T, H, V],
    g, beta [B, T, H] -> (o [B, T, H, V], final_state [N, H, K, V] or None); B is 1 with cu_seqlens."""
    return _delta_rule("gdn", q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                       use_qk_l2norm_in_kernel)  # fmt: skip


def chunk_kda(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, beta: torch.Tensor,
              scale: float | None = None, initial_state: torch.Tensor | None = None, output_final_state: bool = False,
              use_qk_l2norm_in_kernel: bool = False,
              cu_seqlens: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """flash-linear-attention's chunk_kda on sigdnn's kda: chunk_gated_delta_rule's tensors with g [B, T, H, K]
    (one log decay per key channel)."""
    return _delta_rule("kda", q, k, v, g, beta, scale, initial_state, output_final_state, cu_seqlens,
                       use_qk_l2norm_in_kernel)  # fmt: skip


def _flash_band(causal: bool, window_size: tuple[int, int]) -> tuple[int | None, int | None]:
    """flash-attention's window (left, right; -1: unbounded) as sigdnn's (left_bound, right_bound): sigdnn's left
    bound counts the diagonal's key; a right bound beside the causal mask is the mask's (right 0)."""
    left, right = (int(w) for w in window_size)
    return (left + 1 if left >= 0 else None), (right if right >= 0 and not causal else None)


def flash_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dropout_p: float = 0.0,
                    softmax_scale: float | None = None, causal: bool = False,
                    window_size: tuple[int, int] = (-1, -1)) -> torch.Tensor:  # fmt: skip
    """flash-attention's flash_attn_func on sigdnn's sdpa: q [B, Sq, Hq, D], k [B, Sk, Hkv, D], v [B, Sk, Hkv, Dv]
    -> o [B, Sq, Hq, Dv] (a view of sdpa's [B, Hq, Sq, Dv] output). As flash-attention's, the causal mask and
    ``window_size`` align to the bottom-right corner: query i sees keys i + Sk - Sq - left .. i + Sk - Sq + right
    (Mistral's sliding window: ``window_size=(w - 1, 0)``, causal). Dropout is not supported."""
    if dropout_p:
        raise NotImplementedError("sigdnn.torch.flash_attention(dropout_p > 0): not supported")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise UsageError(f"flash_attention: {name} must be [B, S, H, D], got {t.dim()}-d {list(t.shape)}")
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    left, right = _flash_band(causal, window_size)
    heads = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, S, D] views of the caller's tensors
    o, _ = ops.sdpa(*heads, scale, bool(causal), True, left, right)
    return o.transpose(1, 2)


def varlen_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
                     cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, *,
                     softmax_scale: float | None = None, causal: bool = False,
                     window_size: tuple[int, int] = (-1, -1)) -> torch.Tensor:  # fmt: skip
    """flash-attention's flash_attn_varlen_func on sigdnn's ragged sdpa: q [Tq, Hq, D], k [Tk, Hkv, D],
    v [Tk, Hkv, Dv] token-packed by cu_seqlens -> o [Tq, Hq, Dv]. As flash-attention's, the causal mask and
    ``window_size`` (left, right; -1: unbounded) align to each sequence's bottom-right corner: query i of a
    sequence of Sq queries and Sk keys sees keys i + Sk - Sq - left .. i + Sk - Sq + right."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else float(softmax_scale)
    left_bound, right_bound = _flash_band(causal, window_size)
    o, _ = varlen.sdpa_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, int(max_seqlen_q), int(max_seqlen_k), scale,
                              bool(causal), True, left_bound, right_bound)  # fmt: skip
    return o


@contextlib.contextmanager
def attention() -> Iterator[None]:
    """Route ``torch.nn.functional.scaled_dot_product_attention`` to sigdnn inside the block."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = scaled_dot_product_attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
