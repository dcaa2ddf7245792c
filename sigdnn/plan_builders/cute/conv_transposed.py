"""CuTe DSL conv fprop for few output channels as the transposed GEMM: im2col tiles, or whole output rows.

The implicit-GEMM fprop (conv_implicit.py) with the GEMM's operands swapped:
y^T = W x im2col(x)^T, the output channels as M (one 64-row tile) and the
pixels as N (256 a tile), so each wgmma is m64n256k16 instead of the
m64n64k16 that K <= 64 output channels leave the plain form, whose
shared-memory reads bound it. Everything else -- dtypes, layouts, padding,
stride, dilation, the bias / activation regions it claims -- is the implicit
builder's; the bias runs along the GEMM's rows (kernels/conv_transposed_sm90.py).

``cute.conv_fprop_rows`` (kernels/conv_rows_sm90.py) narrows it to 3x3 convs
on 64 channels with rows of at most 62 pixels (ResNet-50's conv2_3x3): a tile
is four output rows, and each filter row's three taps read one load of x's
rows at three offsets, so x comes through L2 three times, not nine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cute.conv_geometry import ImplicitConv, row_kernel_reason
from sigdnn.plan_builders.cute.conv_implicit import ConvChain, CuteConvImplicitBuilder, plan_conv
from sigdnn.plan_builders.cute.gemm_layout import GemmConfig
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device

TRANSPOSED_CONFIG = GemmConfig(64, 256, True)  # 64 output channels by 256 pixels, each warpgroup its own
MAX_K = 64  # output channels: one M tile (more would re-read every pixel tile once per M tile)


def transposed_reason(view: ImplicitConv) -> str | None:
    """Why the transposed conv cannot run this conv, or None when it can."""
    if view.rank != 2:
        return f"{view.rank}-D convolution; the transposed conv takes 2-D"
    if view.k_out > MAX_K:
        return f"{view.k_out} output channels; the transposed conv takes up to {MAX_K}"
    return None


def transposed_view(view: ImplicitConv) -> ImplicitConv:
    """The same conv as the transposed GEMM: y read column-major (channels contiguous), the bias by row."""
    return attrs.evolve(view, spec=attrs.evolve(view.spec, c_major="m", bias_per="m"))


class CuteConvTransposedBuilder(CuteConvImplicitBuilder):
    """2-D NHWC conv fprop on sm_90 for K <= 64 output channels: y^T = W x im2col(x)^T, fused epilogue."""

    name = "cute.conv_fprop_transposed"
    engine_id = IN_TREE[name]
    priority = 2  # above cute.conv_fprop_implicit where both apply
    kind = "fprop_t"  # the conv kernel (kernels/conv_launch.KINDS) and its one tile config
    config = TRANSPOSED_CONFIG

    @staticmethod
    def reason(view: ImplicitConv) -> str | None:
        """Why this builder's kernel cannot run the conv, or None when it can."""
        return transposed_reason(view)

    def plan(self, node: Node, graph: Graph, chain: ConvChain | None = None) -> ImplicitConv:
        view = plan_conv(node, graph, chain)
        reason = self.reason(view)
        if reason is not None:
            raise NotSupported(f"node '{node.name}': {reason}")
        return transposed_view(view)

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        return [self.config.label]

    def _launch(self, view: ImplicitConv, device: Device, label: str | None, where: str) -> Any:
        from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch

        _, sm_count = device_properties(device_id_of(device))
        return ConvLaunch(view.spec, self.config, view.geometry, sm_count, self.kind)


ROWS_CONFIG = GemmConfig(64, 256, True)  # four output rows of 64 pixel slots by 64 output channels
ROWS = 4  # output rows a tile (kernels/conv_rows_sm90.py)
MAX_ROW_Q = 62  # pixel slots 62 and 63 of a row take the next row's pixels: only past Q may they


def rows_reason(view: ImplicitConv) -> str | None:
    """Why the row conv cannot run this conv, or None when it can. (Its GEMM N extent, 64 pixel slots a
    row, never outnumbers x's elements when C = 64: plan_conv's 2^31 bound on x covers it.)"""
    reason = transposed_reason(view)
    if reason is not None:
        return reason
    reason = row_kernel_reason(view.geometry, "row conv")
    if reason is not None:
        return reason
    p, q = view.geometry[7:9]
    if q > MAX_ROW_Q or p % ROWS:
        return f"{p} x {q} output pixels; the row conv takes rows of up to {MAX_ROW_Q}, a multiple of {ROWS} of them"
    return None


class CuteConvRowsBuilder(CuteConvTransposedBuilder):
    """2-D NHWC 3x3 conv fprop on 64 channels, sm_90: the transposed GEMM over four output rows a tile."""

    name = "cute.conv_fprop_rows"
    engine_id = IN_TREE[name]
    priority = 3  # above cute.conv_fprop_transposed where both apply
    kind = "fprop_rows"
    config = ROWS_CONFIG

    @staticmethod
    def reason(view: ImplicitConv) -> str | None:
        return rows_reason(view)
