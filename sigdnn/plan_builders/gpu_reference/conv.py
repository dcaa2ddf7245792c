"""GPU reference convolution: fprop, dgrad and wgrad as im2col GEMMs in float64.

y[n, k, o] = sum over c of k's group and taps r of x[n, c, o*stride + r*dilation - pre] w[k, c, r]
(cross-correlation, docs/ops.md). Each pass gathers its operand's im2col
matrix from host-made maps (``windows``: which source position each
position's tap reads), then runs one float64 GEMM per group over every image
at once. The matrix comes in one of two orders, chosen at build time by the
tensor the pass writes (fprop's y, dgrad's dx; wgrad's x, which it gathers):

* channels innermost in memory (NHWC, NDHWC, NWC): rows are output positions
  (n, p), columns (tap t, channel c); the inputs are read in their
  channels-last order (``input_orders``: a plain copy of such a buffer), a row
  gathers its channels one after another (``Array.take_window_rows``), and
  each GEMM writes its result in the output's storage order:

  * fprop: y[g] (N*O x Kg) = col(x)[g] (N*O x R*Cg) @ W[g] (R*Cg x Kg);
  * dgrad: dx[g] (N*S x Cg) = col(dy)[g] (N*S x R*Kg) @ W[g] (R*Kg x Cg),
    col(dy) holding for each input position and tap the dy element whose
    window put that tap there;
  * wgrad: dw[g] (Kg x R*Cg) = dy[g]^T (Kg x N*O) @ col(x)[g] (N*O x R*Cg).

* otherwise (NCHW and any other order): rows (channel c, tap t), columns
  (n, p), gathered as an outer sum of a channel map and the columns'
  n * C * S + window[p, t] (``Array.take_windows``) from the logical (N, C, *S)
  copy, and the transposed products: y[g] = W[g] (Kg x Cg*R) @ col(x)[g];
  dx[g] = W[g] (Cg x Kg*R) @ col(dy)[g]; dw[g]^T = col(x)[g] @ dy[g]^T.

Either way every product and sum is a float64 FMA of the GEMM; the two orders
differ only in the order of each output's sum over (c, t), and both write
through the output's strides (``Permuted``: no transpose is made). The maps
are made once, when the plan is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import ClassVar

import attrs
import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import packed_strides
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_dgrad import ConvDgrad
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.conv_wgrad import ConvWgrad
from sigdnn.plan_builders.gpu_reference import windows
from sigdnn.plan_builders.gpu_reference.arrays import Array, Permuted, offsets
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.registry.engine_ids import IN_TREE

Dims = tuple[int, ...]
Pass = Callable[[Array, Array], Array | Permuted]


def frozen(array: np.ndarray) -> np.ndarray:
    """A plan's map made read-only: the device keeps its upload by identity for the plan's life
    (``Gpu.upload_kept``), so it must never change."""
    array.flags.writeable = False
    return array


def channels_last(rank: int) -> Dims:
    """The axis order (N, *spatial, C) of a rank-``rank`` conv tensor."""
    return (0, *range(2, rank), 1)


def channels_innermost(dims: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether channels (axis 1, longer than 1) have the smallest stride of the axes longer than 1: the order in
    which a pass writes this tensor and reads its sources in runs."""
    others = [s for a, (d, s) in enumerate(zip(dims, strides, strict=True)) if a != 1 and d > 1]
    return dims[1] > 1 and all(strides[1] < s for s in others)


def read_strides(dims: Dims, rows: bool) -> Dims:
    """The logical axes' strides in the packed copy a tensor is read into (channels-last where ``rows``)."""
    return packed_strides(dims, channels_last(len(dims)) if rows else None)


@attrs.frozen
class Rows:
    """The maps of an im2col matrix (G, N * P, taps * Cg) with a row per position (``Array.take_window_rows``)."""

    window: np.ndarray  # (P, taps): the tap's offset in an image of the source, -1 in the padding
    channels: np.ndarray  # (C,): each channel's offset
    image: int
    n: int
    identity: bool  # the matrix is the source itself, (N * P, C) packed: a 1 x 1 window of stride 1 on every pixel

    @classmethod
    def of(cls, dims: Dims, strides: Dims, window: np.ndarray) -> Rows:
        """The maps of a source of logical ``dims`` (N, C, *S) held with ``strides``; window as ``windows``'."""
        at = offsets(dims[2:], strides[2:]).reshape(-1)
        placed = np.where(window >= 0, at[np.maximum(window, 0)], -1).astype(np.int64)
        channels = np.arange(dims[1], dtype=np.int64) * strides[1]
        pixels = np.arange(math.prod(dims[2:]), dtype=np.int64) * dims[1]
        identity = strides[1] == 1 and strides[0] == pixels.size * dims[1] and np.array_equal(placed.T, [pixels])
        return cls(frozen(placed), frozen(channels), strides[0], dims[0], bool(identity))

    def gather(self, source: Array, groups: int) -> Array:
        if self.identity and groups == 1:  # (no copy: the im2col matrix of a 1 x 1 window over every pixel)
            return source.reshape(1, self.n * self.window.shape[0], self.channels.size)
        return source.take_window_rows(self.window, self.channels, self.image, self.n, groups)


@attrs.frozen
class Columns:
    """The maps of an im2col matrix (G, Cg * taps, N * P) of a packed (N, C, *S) source (``Array.take_windows``):
    channel c' of group g and tap t in row c' * taps + t, image n and position p in column n * P + p."""

    channels: np.ndarray  # (C,): c * S
    window: np.ndarray  # (taps, P): window transposed
    image: int
    n: int

    @classmethod
    def of(cls, dims: Dims, window: np.ndarray) -> Columns:
        n, c = dims[:2]
        spatial = math.prod(dims[2:])
        channels, transposed = np.arange(c, dtype=np.int64) * spatial, np.ascontiguousarray(window.T, np.int64)
        return cls(frozen(channels), frozen(transposed), c * spatial, n)

    def gather(self, source: Array, groups: int) -> Array:
        col = source.take_windows(self.channels, self.window, self.image, self.n)  # (C, taps * N * P)
        return col.reshape(groups, -1, self.n * self.window.shape[1])


def fprop(x_dims: Dims, w_dims: Dims, op: ConvFprop, rows: bool) -> Pass:
    """y from (x, w) read in ``read_strides``' order: (G, N, *O, Kg) where ``rows``, else (K, N, *O)."""
    n, c, *size = x_dims
    k, cg, *kernel = w_dims
    groups, kg, taps = c // cg, k // (c // cg), math.prod(kernel)
    window = windows.forward(size, kernel, op.pre_padding, op.post_padding, op.stride, op.dilation)
    out = [windows.out_size(*a) for a in zip(size, op.pre_padding, op.post_padding, kernel, op.stride, op.dilation)]
    spatial = tuple(range(2, 2 + len(out)))
    if not rows:
        columns = Columns.of(x_dims, window)

        def by_columns(x: Array, w: Array) -> Permuted:
            y = w.reshape(groups, kg, cg * taps).matmul(columns.gather(x, groups))  # (G, Kg, N*O)
            return Permuted(y.reshape(k, n, *out), (1, 0, *spatial))

        return by_columns
    source, ws = Rows.of(x_dims, read_strides(x_dims, True), window), read_strides(w_dims, True)

    def by_rows(x: Array, w: Array) -> Permuted:
        # W[g] (R*Cg x Kg): element (t * Cg + c, k) = w[g * Kg + k, c, t]
        wt = w.strided((groups, taps, cg, kg), (kg * ws[0], ws[-1], ws[1], ws[0])).reshape(groups, taps * cg, kg)
        y = source.gather(x, groups).matmul(wt)  # (G, N*O, Kg)
        return Permuted(y.reshape(groups, n, *out, kg), (1, 0, *spatial, 1))

    return by_rows


def dgrad(dy_dims: Dims, w_dims: Dims, dx_dims: Dims, op: ConvDgrad, rows: bool) -> Pass:
    """dx from (dy, w) read in ``read_strides``' order: (G, N, *S, Cg) where ``rows``, else (C, N, *S)."""
    n, c, *size = dx_dims
    k, cg, *kernel = w_dims
    groups, kg, taps = c // cg, k // (c // cg), math.prod(kernel)
    window = windows.inverse(size, dy_dims[2:], kernel, op.pre_padding, op.stride, op.dilation)
    spatial = tuple(range(2, 2 + len(size)))
    ws = read_strides(w_dims, rows)
    if not rows:
        columns = Columns.of(dy_dims, window)

        def by_columns(dy: Array, w: Array) -> Permuted:
            # W[g] (Cg x Kg*R): element (c, k * R + t) = w[g * Kg + k, c, t]
            wt = w.strided((groups, cg, kg, taps), (kg * ws[0], ws[1], ws[0], ws[-1])).reshape(groups, cg, kg * taps)
            dx = wt.matmul(columns.gather(dy, groups))  # (G, Cg, N*S)
            return Permuted(dx.reshape(c, n, *size), (1, 0, *spatial))

        return by_columns
    source = Rows.of(dy_dims, read_strides(dy_dims, True), window)

    def by_rows(dy: Array, w: Array) -> Permuted:
        # W[g] (R*Kg x Cg): element (t * Kg + k, c) = w[g * Kg + k, c, t]
        wt = w.strided((groups, taps, kg, cg), (kg * ws[0], ws[-1], ws[0], ws[1])).reshape(groups, taps * kg, cg)
        dx = source.gather(dy, groups).matmul(wt)  # (G, N*S, Cg)
        return Permuted(dx.reshape(groups, n, *size, cg), (1, 0, *spatial, 1))

    return by_rows


def wgrad(x_dims: Dims, dy_dims: Dims, dw_dims: Dims, op: ConvWgrad, rows: bool) -> Pass:
    """dw from (x, dy) read in ``read_strides``' order: (K, *R, Cg) where ``rows``, else (G, Cg, *R, Kg)."""
    n, c, *size = x_dims
    k, cg, *kernel = dw_dims
    groups, kg = c // cg, k // (c // cg)
    window = windows.forward(size, kernel, op.pre_padding, op.post_padding, op.stride, op.dilation)
    positions = window.shape[0]
    spatial = tuple(range(2, 2 + len(kernel)))
    ds = read_strides(dy_dims, rows)
    if not rows:
        columns = Columns.of(x_dims, window)

        def by_columns(x: Array, dy: Array) -> Permuted:
            # dy[g]^T (N*O x Kg): element (n * O + o, k) = dy[n, g * Kg + k, o]
            dy_t = dy.strided((groups, n, positions, kg), (kg * ds[1], ds[0], ds[-1], ds[1]))
            dw_t = columns.gather(x, groups).matmul(dy_t.reshape(groups, n * positions, kg))  # (G, Cg*R, Kg)
            return Permuted(dw_t.reshape(groups, cg, *kernel, kg), (0, 1, *spatial, 0))

        return by_columns
    source = Rows.of(x_dims, read_strides(x_dims, True), window)

    def by_rows(x: Array, dy: Array) -> Permuted:
        # dy[g] arranged (Kg x N*O): element (k, n * O + o) = dy[n, g * Kg + k, o]
        dy_k = dy.strided((groups, kg, n, positions), (kg * ds[1], ds[1], ds[0], ds[-1]))
        dw = dy_k.reshape(groups, kg, n * positions).matmul(source.gather(x, groups))  # (G, Kg, R*Cg)
        return Permuted(dw.reshape(k, *kernel, cg), (0, *spatial, 1))

    return by_rows


class GpuReferenceConv(GpuReferenceBuilder):
    """What the three passes share: the order they work in, from the strides of the tensor named ``decides``."""

    decides: ClassVar[str]

    def rows(self, node: Node, graph: Graph) -> bool:
        t = graph.tensors[getattr(node.op, self.decides)]
        return channels_innermost(t.dims, t.strides)

    def input_orders(self, node: Node, graph: Graph) -> dict[str, tuple[int, ...]]:
        if not self.rows(node, graph):
            return {}
        return {p: channels_last(len(graph.tensors[uid].dims)) for p, uid in node.op.inputs().items()}


class GpuReferenceConvFprop(GpuReferenceConv):
    name: ClassVar[str] = "gpu_reference.conv_fprop"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_fprop",)
    decides: ClassVar[str] = "y"

    def formula(self, node: Node, graph: Graph) -> Formula:
        x, w = (graph.tensors[u].dims for u in (node.op.x, node.op.w))
        run = fprop(x, w, node.op, self.rows(node, graph))
        return lambda i: {"y": run(i["x"], i["w"])}


class GpuReferenceConvDgrad(GpuReferenceConv):
    name: ClassVar[str] = "gpu_reference.conv_dgrad"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_dgrad",)
    decides: ClassVar[str] = "dx"

    def formula(self, node: Node, graph: Graph) -> Formula:
        dy, w, dx = (graph.tensors[u].dims for u in (node.op.dy, node.op.w, node.op.dx))
        run = dgrad(dy, w, dx, node.op, self.rows(node, graph))
        return lambda i: {"dx": run(i["dy"], i["w"])}


class GpuReferenceConvWgrad(GpuReferenceConv):
    name: ClassVar[str] = "gpu_reference.conv_wgrad"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_wgrad",)
    decides: ClassVar[str] = "x"

    def formula(self, node: Node, graph: Graph) -> Formula:
        x, dy, dw = (graph.tensors[u].dims for u in (node.op.x, node.op.dy, node.op.dw))
        run = wgrad(x, dy, dw, node.op, self.rows(node, graph))
        return lambda i: {"dw": run(i["x"], i["dy"])}
