"""BatchNormalization, LayerNormalization, RMSNormalization, Softmax, LogSoftmax -> sigdnn normalizations."""

from __future__ import annotations

import math

import numpy as np

from sigdnn.importers.onnx_fold import MAX_FOLDED_ELEMENTS
from sigdnn.importers.onnx_node import OnnxNode, Value, onnx_op


def per_channel(node: OnnxNode, v: Value, rank: int, what: str) -> Value:
    channels = int(np.prod(v.shape)) if isinstance(v, np.ndarray) else v.size
    return node.reshape(v, (1, channels, *(1,) * (rank - 2)), what)


@onnx_op("BatchNormalization")
def batch_normalization(node: OnnxNode) -> list[Value]:
    """Inference: batchnorm_inference with inv_variance = 1/sqrt(var + eps) (computed in float64 when var is known).

    Training mode maps onto batchnorm when only Y is asked for: ONNX's running
    statistics use the biased variance and the opposite momentum convention,
    so they are refused rather than computed differently.
    """
    x = node.tensor(0)
    eps = float(node.attr("epsilon", 1e-5))
    node.attr("momentum")  # moves only the running statistics, which are refused below in training mode
    if node.attr("spatial", 1) != 1:
        raise node.refuse("spatial=0 is not supported")
    rank = len(x.dims)
    scale, bias = node.value(1), node.value(2)
    if node.attr("training_mode", 0):
        if len([o for o in node.proto.output if o]) > 1:
            raise node.refuse("training mode's running_mean / running_var outputs are not produced")
        y, *_ = node.graph.batchnorm(
            x,
            node.materialize(per_channel(node, scale, rank, "scale"), "scale"),
            node.materialize(per_channel(node, bias, rank, "bias"), "bias"),
            epsilon=eps,
            name=node.fresh(""),
        )
        return [y]
    if len([o for o in node.proto.output if o]) > 1:
        raise node.refuse("outputs beyond Y exist only in training mode")
    mean, var = node.value(3), node.value(4)
    if isinstance(var, np.ndarray):
        inv = (1.0 / np.sqrt(var.astype(np.float64) + eps)).astype(var.dtype)
    else:
        eps_v = np.array(eps, dtype=node.dtype(4).numpy)
        inv = node.pointwise("rsqrt", node.pointwise("add", var, eps_v, what="var_eps"), what="inv_variance")
    params = [
        node.materialize(per_channel(node, v, rank, n), n)
        for v, n in ((mean, "mean"), (inv, "inv_variance"), (scale, "scale"), (bias, "bias"))
    ]
    return [node.graph.batchnorm_inference(x, *params, name=node.fresh(""))]


def _stat_dtype_check(node: OnnxNode) -> None:
    stash = node.attr("stash_type", 1)
    if stash != 1:
        raise node.refuse(f"stash_type={stash}: sigdnn keeps statistics in float32 (stash_type=1)")


def _normalized_param(node: OnnxNode, v: Value, x_dims: tuple[int, ...], axis: int, what: str) -> Value:
    """The parameter at x's rank with the normalized dims in full (a known one is broadcast at import time)."""
    full = x_dims[axis:]
    dims = tuple(v.shape) if isinstance(v, np.ndarray) else v.dims
    if dims != full:
        if not isinstance(v, np.ndarray):
            raise node.refuse(f"{what} {list(dims)} must span the normalized dims {list(full)} exactly")
        count = math.prod(full)
        if count > MAX_FOLDED_ELEMENTS:
            raise node.refuse(f"{what} {list(dims)} broadcast to {list(full)} would make {count} elements at import "
                              f"time (limit {MAX_FOLDED_ELEMENTS})")  # fmt: skip
        node.importer.spend(count * v.itemsize, node)
        try:
            v = np.ascontiguousarray(np.broadcast_to(v, full))
        except ValueError:
            raise node.refuse(f"{what} {list(dims)} does not broadcast to the normalized dims {list(full)}") from None
    return node.reshape(v, (1,) * axis + full, what)


def _axis(node: OnnxNode, rank: int, default: int = -1) -> int:
    axis = int(node.attr("axis", default))
    if not -rank <= axis < rank:
        raise node.refuse(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


@onnx_op("LayerNormalization")
def layer_normalization(node: OnnxNode) -> list[Value]:
    x = node.tensor(0)
    axis = _axis(node, len(x.dims))
    _stat_dtype_check(node)
    eps = float(node.attr("epsilon", 1e-5))
    scale = _normalized_param(node, node.value(1), x.dims, axis, "scale")
    bias = node.value(2) if node.has(2) else np.zeros(x.dims[axis:], dtype=node.dtype(0).numpy)
    bias = _normalized_param(node, bias, x.dims, axis, "bias")
    stats = any(i < len(node.proto.output) and node.proto.output[i] for i in (1, 2))
    y, mean, inv = node.graph.layernorm(
        "training" if stats else "inference",
        x,
        node.materialize(scale, "scale"),
        node.materialize(bias, "bias"),
        epsilon=eps,
        name=node.fresh(""),
    )
    return [y, mean, inv]


@onnx_op("RMSNormalization")
def rms_normalization(node: OnnxNode) -> list[Value]:
    x = node.tensor(0)
    axis = _axis(node, len(x.dims))
    _stat_dtype_check(node)
    scale = _normalized_param(node, node.value(1), x.dims, axis, "scale")
    y, _ = node.graph.rmsnorm(
        "inference",
        x,
        node.materialize(scale, "scale"),
        epsilon=float(node.attr("epsilon", 1e-5)),
        name=node.fresh(""),
    )
    return [y]


@onnx_op("Softmax", "LogSoftmax")
def softmax(node: OnnxNode) -> list[Value]:
    x = node.tensor(0)
    axis = _axis(node, len(x.dims))
    y, _ = node.graph.softmax(x, axes=axis, log=node.op_type == "LogSoftmax", name=node.fresh(""))
    return [y]
