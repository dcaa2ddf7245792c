"""CuTe DSL conv fprop for few output channels as the transposed implicit GEMM (kernels/conv_transposed_sm90.py).

The implicit-GEMM fprop (conv_implicit.py) with the GEMM's operands swapped:
y^T = W x im2col(x)^T, the output channels as M (one 64-row tile) and the
pixels as N (256 a tile), so each wgmma is m64n256k16 instead of the
m64n64k16 that K <= 64 output channels leave the plain form, whose
shared-memory reads bound it. Everything else -- dtypes, layouts, padding,
stride, dilation, the bias / activation regions it claims -- is the implicit
builder's; the bias runs along the GEMM's rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cute.conv_implicit import ConvChain, CuteConvImplicitBuilder, ImplicitConv, plan_conv
from sigdnn.plan_builders.cute.gemm_layout import GemmConfig
from sigdnn.plan_builders.cute.matmul import device_id_of, device_properties
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

    def plan(self, node: Node, graph: Graph, chain: ConvChain | None = None) -> ImplicitConv:
        view = plan_conv(node, graph, chain)
        reason = transposed_reason(view)
        if reason is not None:
            raise NotSupported(f"node '{node.name}': {reason}")
        return transposed_view(view)

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        return [TRANSPOSED_CONFIG.label]

    def _launch(self, view: ImplicitConv, device: Device, label: str | None, where: str) -> Any:
        from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch

        _, sm_count = device_properties(device_id_of(device))
        return ConvLaunch(view.spec, TRANSPOSED_CONFIG, view.geometry, sm_count, "fprop_t")
