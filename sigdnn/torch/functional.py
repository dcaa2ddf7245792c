"""torch.nn.functional-shaped entry points over the sigdnn ops, and a switch that routes a model's attention here."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence

import torch
import torch.nn.functional as F

from sigdnn.torch import ops


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


@contextlib.contextmanager
def attention() -> Iterator[None]:
    """Route ``torch.nn.functional.scaled_dot_product_attention`` to sigdnn inside the block."""
    original = F.scaled_dot_product_attention
    F.scaled_dot_product_attention = scaled_dot_product_attention
    try:
        yield
    finally:
        F.scaled_dot_product_attention = original
