"""GPU reference convolution: fprop, dgrad and wgrad as im2col GEMMs in float64.

y[n, k, o] = sum over c of k's group and taps r of x[n, c, o*stride + r*dilation - pre] w[k, c, r]
(cross-correlation, docs/ops.md). Each pass gathers its operand's im2col
matrix, rows (channel c, tap t) and columns (image n, position p), from a
host-made window map (``windows``): element (c, t), (n, p) sits at
c * S + n * C * S + window[p, t] of the packed source, an outer sum of a
row map of C entries and the columns' n * C * S + window[p, t], which the
device forms from the window map (``Array.take_windows``; the map of every
element would be their product, of every column taps x N x P entries). Then one float64 GEMM
per group, over every image at once:

* fprop: y[g] = W[g] (Kg x Cg*R) @ col(x)[g] (Cg*R x N*O), written in (K, N, O) order through y's strides;
* dgrad: dx[g] = W[g]^T arranged (Cg x Kg*R) @ col(dy)[g] (Kg*R x N*S),
  col(dy) holding for each input position and tap the dy element whose
  window put that tap there;
* wgrad: dw[g]^T = col(x)[g] (Cg*R x N*O) @ dy[g]^T (N*O x Kg).
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_dgrad import ConvDgrad
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.conv_wgrad import ConvWgrad
from sigdnn.plan_builders.gpu_reference import windows
from sigdnn.plan_builders.gpu_reference.arrays import Array, Permuted, row_major_index
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.registry.engine_ids import IN_TREE


def im2col(source: Array, groups: int, window: np.ndarray) -> Array:
    """(G, Cg * taps, N * positions) of a packed (N, C, *S) source: channel c of group g and tap t in row
    c' * taps + t, image n and position p in column n * positions + p; window[p, t] (or -1: 0) places it."""
    n, c = source.shape[:2]
    spatial = math.prod(source.shape[2:])
    positions, taps = window.shape
    channels = np.arange(c, dtype=np.int64) * spatial
    col = source.take_windows(channels, np.ascontiguousarray(window.T), c * spatial, n)  # (C, taps * N * P)
    return col.reshape(groups, (c // groups) * taps, n * positions)


def fprop(x: Array, w: Array, op: ConvFprop) -> Permuted:
    """y in (K, N, *O) order, which the write stores through y's strides as (N, K, *O)."""
    n, c, *size = x.shape
    k, cg, *kernel = w.shape
    groups = c // cg
    window = windows.forward(size, kernel, op.pre_padding, op.post_padding, op.stride, op.dilation)
    out = [windows.out_size(*a) for a in zip(size, op.pre_padding, op.post_padding, kernel, op.stride, op.dilation)]
    y = w.reshape(groups, k // groups, cg * math.prod(kernel)).matmul(im2col(x, groups, window))  # (G, Kg, N*O)
    return Permuted(y.reshape(k, n, *out), (1, 0, *range(2, 2 + len(out))))


def dgrad(dy: Array, w: Array, dx_dims: tuple[int, ...], op: ConvDgrad) -> Permuted:
    """dx in (C, N, *S) order, stored through dx's strides as (N, C, *S)."""
    n, c, *size = dx_dims
    k, cg, *kernel = w.shape
    groups, kg, taps = c // cg, k // (c // cg), math.prod(kernel)
    window = windows.inverse(size, dy.shape[2:], kernel, op.pre_padding, op.stride, op.dilation)
    # W[g] arranged (Cg, Kg*R): element (c, k*R + r) = w[g*Kg + k, c, r]
    wt = w.take(row_major_index((groups, kg, cg, taps)).transpose(0, 2, 1, 3).reshape(groups, cg, kg * taps))
    dx = wt.matmul(im2col(dy, groups, window))  # (G, Cg, N*S)
    return Permuted(dx.reshape(c, n, *size), (1, 0, *range(2, 2 + len(size))))


def wgrad(x: Array, dy: Array, dw_dims: tuple[int, ...], op: ConvWgrad) -> Array:
    n, c, *size = x.shape
    k, cg, *kernel = dw_dims
    groups, kg = c // cg, k // (c // cg)
    window = windows.forward(size, kernel, op.pre_padding, op.post_padding, op.stride, op.dilation)
    positions = window.shape[0]
    dy_t = dy.reshape(n, groups, kg, positions).transpose(1, 0, 3, 2).reshape(groups, n * positions, kg)
    dw_t = im2col(x, groups, window).matmul(dy_t)  # (G, Cg*R, Kg)
    return dw_t.transpose(0, 2, 1).reshape(*dw_dims)


class GpuReferenceConvFprop(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.conv_fprop"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_fprop",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        return lambda i: {"y": fprop(i["x"], i["w"], node.op)}


class GpuReferenceConvDgrad(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.conv_dgrad"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_dgrad",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        dims = graph.tensors[node.op.dx].dims
        return lambda i: {"dx": dgrad(i["dy"], i["w"], dims, node.op)}


class GpuReferenceConvWgrad(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.conv_wgrad"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_wgrad",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        dims = graph.tensors[node.op.dw].dims
        return lambda i: {"dw": wgrad(i["x"], i["dy"], dims, node.op)}
