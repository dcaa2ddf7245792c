"""CuTe DSL conv fprop for few input channels: the filter's width taps folded into channels, then the implicit GEMM.

An image model's first conv has 3 input channels (ResNet-50's 7x7 stride-2
stem), which the implicit GEMM's TMA cannot read (16-byte rows need C a
multiple of 8), so ``cute.conv_fprop`` writes its whole im2col matrix,
R * S * C = 147 values a pixel (233 MiB at batch 64), and reads it back.
Here only the width taps are gathered:

    x'[n, h, q, s * C + c] = x[n, c, h, q * sw - pw + s * dw]   (0 outside x, and in the padding to Cp)
    w'[k, r, 0, s * C + c] = w[k, c, r, s]
    y = conv(x', w') with an R x 1 filter, stride (sh, 1), padding (ph, 0), dilation (dh, 1)

x' holds S * C channels padded to Cp (a multiple of 8, at most one 64-channel
K step of the implicit GEMM: ResNet-50's stem 21 -> 24, x' 3.6 times x's
size where the full im2col is 25 times), and the implicit GEMM
(kernels/conv_sm90.py) gathers the R height taps itself. The sums are the
same products as the direct conv's; only the zeros of the padding are
added. Both gathers are ``kernels/im2col.py``'s narrow kernel: x' as the
im2col of a 1 x S window over every row of x, w' as that of the filter seen
as K images of R x S pixels. x' runs in batch slices through one slice's
workspace (``batch_slices``), the filter's copy after it.

Declines (for ``cute.conv_fprop`` to take): C a multiple of 8 (the implicit
GEMM reads x itself), S * C past 64 channels, or a folded conv the TMA
cannot express (a height stride past 8).

Ranked above ``cute.conv_fprop``: the stem at batch 64 in 0.419 ms against
its 0.514 (H100, tests/gpu/test_cute_conv_folded.py passing there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cute.batch_slices import batch_slices
from sigdnn.plan_builders.cute.bound import BindsLaunches, check_aligned, in_order
from sigdnn.plan_builders.cute.conv import CuteConvFpropBuilder, fprop_operands
from sigdnn.plan_builders.cute.conv_geometry import K_TILE, ImplicitConv, check_geometry
from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config
from sigdnn.plan_builders.cute.gemm_layout import ITEMSIZE, GemmSpec
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties, require_hopper
from sigdnn.registry.contracts import BuildContext, NodePlan
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device, ExecutionContext

VECTOR = 8  # channels of x' a 16-byte row holds


@attrs.frozen
class FoldedConv:
    """A narrow conv fprop with its width taps folded into channels: the two gathers and the conv they feed."""

    conv: ImplicitConv  # one batch slice's conv of x' by w'
    gather_x: tuple[int, ...]  # im2col extents of x' (one slice)
    gather_w: tuple[int, ...]  # im2col extents of w'
    dtype: str
    slices: int
    slice_bytes: tuple[int, int, int]  # x's, x''s and y's bytes a slice

    @property
    def filter_offset(self) -> int:
        """Where w' starts in the workspace: after one slice of x' (16-byte aligned: Cp is a multiple of 8)."""
        return self.slice_bytes[1]

    @property
    def workspace_bytes(self) -> int:
        k, r, *_, cp = self.gather_w  # w' is K x R rows of Cp
        return self.filter_offset + k * r * cp * ITEMSIZE[self.dtype]


def folded_conv(node: Node, graph: Graph) -> FoldedConv:
    """The folded form of a conv fprop node, or NotSupported saying why."""
    x, w, y, dtypes = fprop_operands(node, graph)
    op, where = node.op, f"node '{node.name}'"
    n, c, h, width = x.dims
    k, _, r, s = w.dims
    _, _, p, q = y.dims
    if c % VECTOR == 0:
        raise NotSupported(f"{where}: {c} input channels, a multiple of 8: the implicit GEMM reads x itself")
    cp = -(-s * c // VECTOR) * VECTOR
    if cp > K_TILE:
        raise NotSupported(f"{where}: {s} width taps of {c} channels fold into {s * c}; supported: at most {K_TILE}")
    itemsize = ITEMSIZE[dtypes[0]]
    slices = batch_slices(n, h * q * cp * itemsize)
    images = n // slices
    (ph, pw), (post_h, _), (sh, sw), (dh, dw) = op.pre_padding, op.post_padding, op.stride, op.dilation
    geometry = (images, h, q, cp, k, r, 1, p, q, ph, 0, post_h, 0, sh, 1, dh, 1)
    x_slice, folded_slice, y_slice = (images * e for e in (c * h * width, h * q * cp, k * p * q))
    check_geometry(where, geometry, dtypes[2], x_slice, folded_slice, k * r * cp, y_slice)
    spec = GemmSpec(dtypes[0], dtypes[1], dtypes[2], "k", "k", "n", False, False)
    gather_x = (images, h, width, c, h, q, 1, s, 0, pw, 1, sw, 1, dw, cp)
    gather_w = (k, r, s, c, r, 1, 1, s, 0, 0, 1, 1, 1, 1, cp)
    slice_bytes = (x_slice * itemsize, folded_slice * itemsize, y_slice * ITEMSIZE[dtypes[2]])
    return FoldedConv(ImplicitConv(spec, geometry), gather_x, gather_w, dtypes[0], slices, slice_bytes)


class CuteConvFoldedPlan(BindsLaunches, NodePlan):
    """w' into the workspace after one slice of x', then per batch slice: x' gathered, the implicit GEMM into y."""

    def __init__(self, view: FoldedConv, conv: Any, gather_x: Any, gather_w: Any, where: str) -> None:
        self._view = view
        self._conv = conv
        self._gather_x = gather_x
        self._gather_w = gather_w
        self.workspace_bytes = view.workspace_bytes
        self._where = where

    @property
    def config(self) -> Any:
        return self._conv.config

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        x, w, y = buffers["x"], buffers["w"], buffers["y"]
        check_aligned(self._where, x=x, w=w, y=y)
        folded, stream = context.workspace.ptr, context.stream
        filt = folded + self._view.filter_offset
        launches = [functools.partial(self._gather_w, w.ptr, filt, stream)]
        x_step, _, y_step = self._view.slice_bytes
        for i in range(self._view.slices):
            launches.append(functools.partial(self._gather_x, x.ptr + i * x_step, folded, stream))
            launches.append(functools.partial(self._conv, folded, filt, y.ptr + i * y_step, stream, 0))
        return in_order(*launches)


class CuteConvFoldedBuilder(CuteConvFpropBuilder):
    """2-D NHWC conv fprop of few input channels on sm_90: width taps folded into channels, then the implicit GEMM.
    The im2col builder's keys; it declines the convs whose C is a multiple of 8 or whose S * C passes 64."""

    name = "cute.conv_fprop_folded"
    engine_id = IN_TREE[name]
    priority = 1  # above cute.conv_fprop: x' is 3.6x x where the im2col matrix is 25x (the stem 1.23x faster, H100)

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        folded_conv(node, graph)
        require_hopper(node, device)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch
        from sigdnn.plan_builders.cute.kernels.im2col import Im2colLaunch

        self.check(node, graph, context.device)
        view = folded_conv(node, graph)
        _, sm_count = device_properties(device_id_of(context.device))
        conv = ConvLaunch(view.conv.spec, default_conv_config(view.conv, sm_count), view.conv.geometry, sm_count)
        gather_x, gather_w = (Im2colLaunch(view.dtype, e) for e in (view.gather_x, view.gather_w))
        return CuteConvFoldedPlan(view, conv, gather_x, gather_w, f"node '{node.name}'")
