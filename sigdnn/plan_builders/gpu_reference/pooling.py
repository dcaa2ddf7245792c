"""GPU reference pooling and its backward: window gathers and row reductions in float64.

Forward: each output's window gathered (padding as -inf for max, 0 for the
averages), then max (NaN propagates) or sum / divisor (the window size, or
its real elements for average_count_exclude_pad). Backward: the averages
send dy / divisor to every real tap; max sends dy to one tap per window, the
first maximum in row-major tap order among real taps (a NaN counts as a new
maximum, so the last NaN wins; a window of only -inf picks its first real
tap), docs/ops.md's rule. dx gathers, per input position and tap, the dy of
the window that put that tap there (``windows.inverse``) and adds them in
tap order from 0.0, as the CPU reference accumulates (a cancelling sum then
leaves the same float64 residue on both, which a bfloat16 output keeps as
thousands of its ulps).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.pooling import Pooling
from sigdnn.plan_builders.gpu_reference import windows
from sigdnn.plan_builders.gpu_reference.arrays import Array, where
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.registry.engine_ids import IN_TREE


def _dilation(op: Pooling) -> tuple[int, ...]:
    return (1,) * len(op.window)


def planes(source: Array, window: np.ndarray, pad: float = 0.0) -> Array:
    """(N, C, positions, taps) of a packed (N, C, *S) source by a window map, ``pad`` where it holds -1: one
    gather over the outer sum of the planes' starts (N x C) and the window (positions x taps)."""
    n, c, *size = source.shape
    starts = np.arange(n * c, dtype=np.int64) * math.prod(size)
    return source.take_outer(starts, window.reshape(-1), pad).reshape(n, c, *window.shape)


def divisor(op: Pooling, window: np.ndarray) -> float | np.ndarray:
    """Per output position: the window size, or its real (non-padding) taps."""
    if op.mode == "average_count_exclude_pad":
        return (window >= 0).sum(axis=1).astype(np.float64)
    return float(math.prod(op.window))


def pool(x: Array, op: Pooling) -> Array:
    size = x.shape[2:]
    window = windows.forward(size, op.window, op.pre_padding, op.post_padding, op.stride, _dilation(op))
    out = [
        windows.out_size(*a) for a in zip(size, op.pre_padding, op.post_padding, op.window, op.stride, _dilation(op))
    ]
    taps = planes(x, window, -math.inf if op.mode == "max" else 0.0)
    if op.mode == "max":
        y = taps.reduce_last("MAX")
    else:
        d = divisor(op, window)
        y = taps.reduce_last("SUM") / (d if isinstance(d, float) else Array.from_host(x.gpu, d))
    return y.reshape(*x.shape[:2], *out)


def chosen_taps(x: Array, op: Pooling, window: np.ndarray) -> Array:
    """(N, C, positions): the tap each max window sends its gradient to (a float64 tap number)."""
    taps = planes(x, window, -math.inf)
    real = Array.from_host(x.gpu, (window >= 0).astype(np.float64))
    number = Array.from_host(x.gpu, np.arange(window.shape[1], dtype=np.float64))
    nan = taps.apply("ISNAN") & real
    last_nan = where(nan, number, -1.0).reduce_last("MAX")
    top = where(real, taps, -math.inf).reduce_last("MAX")
    first_top = where(real & (taps == top.reshape(*top.shape, 1)), number, math.inf).reduce_last("MIN")
    return where(last_nan >= 0.0, last_nan, first_top)


def pool_backward(dy: Array, x: Array, op: Pooling) -> Array:
    size, out = x.shape[2:], dy.shape[2:]
    forward = windows.forward(size, op.window, op.pre_padding, op.post_padding, op.stride, _dilation(op))
    inverse = windows.inverse(size, out, op.window, op.pre_padding, op.stride, _dilation(op))
    grad = dy.reshape(*dy.shape[:2], math.prod(out))
    if op.mode == "max":  # planes(..., inverse): (N, C, inputs, taps) into the outputs
        number = Array.from_host(dy.gpu, np.arange(inverse.shape[1], dtype=np.float64))
        picked = planes(chosen_taps(x, op, forward), inverse, -1.0) == number
        parts = where(picked, planes(grad, inverse), 0.0)
    else:
        d = divisor(op, forward)
        share = grad / (d if isinstance(d, float) else Array.from_host(dy.gpu, d))
        parts = planes(share, inverse)
    return parts.sum_last_in_order().reshape(*x.shape)


class GpuReferencePooling(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.pooling"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("pooling",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        return lambda i: {"y": pool(i["x"], node.op)}


class GpuReferencePoolingBackward(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.pooling_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("pooling_backward",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        return lambda i: {"dx": pool_backward(i["dy"], i["x"], node.op)}
