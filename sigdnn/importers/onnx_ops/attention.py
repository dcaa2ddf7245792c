"""Attention (opset 23) -> sigdnn sdpa, 4-D [B, H, S, D] inputs as they are, 3-D [B, S, H*D] split into heads."""

from __future__ import annotations

import math

import numpy as np

from sigdnn.graph.tensor import Tensor
from sigdnn.importers.onnx_node import OnnxNode, Value, onnx_op


def _heads(node: OnnxNode, t: Tensor, heads: int | None, what: str) -> Tensor:
    if len(t.dims) == 4:
        return t
    if len(t.dims) != 3 or not heads or t.dims[2] % heads:
        raise node.refuse(f"{what} {list(t.dims)}: 3-D inputs need q_num_heads / kv_num_heads dividing the last dim")
    b, s, hd = t.dims
    split = node.reshape(t, (b, s, heads, hd // heads), f"{what}_heads")
    return node.transpose(split, (0, 2, 1, 3), f"{what}_bhsd")  # type: ignore[return-value]


def _bias(node: OnnxNode, mask: Value, dtype: np.dtype) -> Value:
    """A boolean mask (True: attend) as an additive bias of 0 / -inf; a float mask is the bias itself."""
    dims = tuple(mask.shape) if isinstance(mask, np.ndarray) else mask.dims
    # before the reshape: its output has no dtype of its own yet, and dtype_of would give the graph's default
    is_bool = (mask.dtype == np.bool_) if isinstance(mask, np.ndarray) else not node.graph.dtype_of(mask).is_float
    mask = node.reshape(mask, (1,) * (4 - len(dims)) + tuple(dims), "mask_4d")
    if not is_bool:
        return mask
    if isinstance(mask, np.ndarray):
        return np.where(mask, 0.0, -np.inf).astype(dtype)
    zero, minus_inf = np.array(0, dtype=dtype), np.array(-np.inf, dtype=dtype)
    return node.pointwise("binary_select", zero, minus_inf, mask, what="mask_bias")


def _is_causal(mask: Value, q_len: int, kv_len: int) -> bool:
    """Whether a mask known at import time is the top-left causal mask (query i sees key j exactly when j <= i) for
    every batch entry and head: True / 0 where j <= i, False / -inf above, as exporters write torch.triu's mask."""
    if not isinstance(mask, np.ndarray) or mask.ndim < 2 or mask.shape[-2:] != (q_len, kv_len):
        return False
    rows = mask.reshape(-1, q_len, kv_len)
    if any(not np.array_equal(rows[0], r) for r in rows[1:]):
        return False
    visible = np.tril(np.ones((q_len, kv_len), dtype=bool))
    if mask.dtype == np.bool_:
        return bool(np.array_equal(rows[0], visible))
    bias = rows[0].astype(np.float64)
    return bool(np.all(bias[visible] == 0) and np.all(bias[~visible] == -np.inf))


@onnx_op("Attention")
def attention(node: OnnxNode) -> list[Value]:
    if node.has(4) or node.has(5):
        raise node.refuse("past_key / past_value (KV cache) inputs are not supported")
    if any(node.has(i) for i in range(6, len(node.proto.input))):
        raise node.refuse("inputs beyond past_value (nonpad_kv_seqlen, ...) are not supported")
    if any(node.proto.output[i] for i in range(1, len(node.proto.output))):
        raise node.refuse("only the first output (Y) is produced")
    if float(node.attr("softcap", 0.0)) != 0.0:
        raise node.refuse("softcap is not supported")
    if int(node.attr("qk_matmul_output_mode", 0)) != 0:
        raise node.refuse("qk_matmul_output_mode is not supported")
    node.attr("softmax_precision")  # the reference computes the softmax in float64 whatever is asked
    q3 = len(node.dims(0)) == 3
    q = _heads(node, node.tensor(0), node.attr("q_num_heads"), "q")
    k = _heads(node, node.tensor(1), node.attr("kv_num_heads"), "k")
    v = _heads(node, node.tensor(2), node.attr("kv_num_heads"), "v")
    scale = node.attr("scale", None)
    scale = 1.0 / math.sqrt(q.dims[3]) if scale is None else float(scale)
    bias, causal = None, bool(node.attr("is_causal", 0))
    if node.has(3) and _is_causal(node.value(3), q.dims[2], k.dims[2]):
        causal = True  # the exporter's causal mask: sdpa's own, no [Sq, Skv] bias to read
    elif node.has(3):
        bias = node.materialize(_bias(node, node.value(3), node.dtype(0).numpy), "mask")
    o, _ = node.graph.sdpa(q, k, v, attn_scale=scale, bias=bias, use_causal_mask=causal, name=node.fresh("sdpa"))
    if q3:
        b, h, s, dv = o.dims
        o = node.reshape(node.transpose(o, (0, 2, 1, 3), "o_bshd"), (b, s, h * dv), "o_merge")
    return [o]
