"""GPU reference convolution: fprop, dgrad and wgrad as im2col GEMMs in float64.

y[n, k, o] = sum over c of k's group and taps r of x[n, c, o*stride + r*dilation - pre] w[k, c, r]
(cross-correlation, docs/ops.md). Each pass gathers its operand's columns by a
host-made window map (``windows``), then one float64 GEMM per image and
group:

* fprop: y[n, g] = W[g] (Kg x Cg*R) @ col(x)[n, g] (Cg*R x O);
* dgrad: dx[n, g] = W[g]^T arranged (Cg x Kg*R) @ col(dy)[n, g] (Kg*R x S),
  col(dy) holding for each input position and tap the dy element whose
  window put that tap there;
* wgrad: dw[g] = dy[g] (Kg x N*O) @ col(x)[g]^T (N*O x Cg*R).
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
from sigdnn.plan_builders.gpu_reference.arrays import Array, row_major_index
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.registry.engine_ids import IN_TREE


def columns(source_shape: tuple[int, ...], groups: int, window: np.ndarray) -> np.ndarray:
    """Index map (N, G, Cg * taps, positions) into a packed (N, C, *S) tensor: channel c of group g,
    tap t, position p reads window[p, t] (or -1)."""
    n, c = source_shape[:2]
    spatial = math.prod(source_shape[2:])
    cg = c // groups
    positions, taps = window.shape
    base = row_major_index((n, c))[:, :, None, None] * spatial  # (N, C, 1, 1)
    index = np.where(window.T[None, None] >= 0, base + window.T[None, None], -1)  # (N, C, taps, positions)
    return index.reshape(n, groups, cg * taps, positions)


def fprop(x: Array, w: Array, op: ConvFprop) -> Array:
    n, c, *size = x.shape
    k, cg, *kernel = w.shape
    groups = c // cg
    window = windows.forward(size, kernel, op.pre_padding, op.post_padding, op.stride, op.dilation)
    out = [windows.out_size(*a) for a in zip(size, op.pre_padding, op.post_padding, kernel, op.stride, op.dilation)]
    col = x.take(columns(x.shape, groups, window))  # (N, G, Cg*R, O)
    wg = w.reshape(groups, k // groups, cg * math.prod(kernel)).broadcast_to(
        (n, groups, k // groups, cg * math.prod(kernel))
    )
    y = wg.reshape(n * groups, k // groups, -1).matmul(col.reshape(n * groups, cg * math.prod(kernel), -1))
    return y.reshape(n, k, *out)


def dgrad(dy: Array, w: Array, dx_dims: tuple[int, ...], op: ConvDgrad) -> Array:
    n, c, *size = dx_dims
    k, cg, *kernel = w.shape
    groups, kg, taps = c // cg, k // (c // cg), math.prod(kernel)
    window = windows.inverse(size, dy.shape[2:], kernel, op.pre_padding, op.stride, op.dilation)
    col = dy.take(columns(dy.shape, groups, window))  # (N, G, Kg*R, S)
    # W[g] arranged (Cg, Kg*R): element (c, k*R + r) = w[g*Kg + k, c, r]
    wt = w.take(row_major_index((groups, kg, cg, taps)).transpose(0, 2, 1, 3).reshape(groups, cg, kg * taps))
    wt = wt.broadcast_to((n, groups, cg, kg * taps)).reshape(n * groups, cg, kg * taps)
    dx = wt.matmul(col.reshape(n * groups, kg * taps, -1))
    return dx.reshape(*dx_dims)


def wgrad(x: Array, dy: Array, dw_dims: tuple[int, ...], op: ConvWgrad) -> Array:
    n, c, *size = x.shape
    k, cg, *kernel = dw_dims
    groups, kg, taps = c // cg, k // (c // cg), math.prod(kernel)
    window = windows.forward(size, kernel, op.pre_padding, op.post_padding, op.stride, op.dilation)
    col = x.take(columns(x.shape, groups, window))  # (N, G, Cg*R, O)
    positions = window.shape[0]
    # (G, N*O, Cg*R) and dy as (G, Kg, N*O)
    b = col.transpose(1, 0, 3, 2).reshape(groups, n * positions, cg * taps)
    a = dy.reshape(n, groups, kg, positions).transpose(1, 2, 0, 3).reshape(groups, kg, n * positions)
    return a.matmul(b).reshape(*dw_dims)


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
