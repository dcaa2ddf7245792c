"""CuTe DSL 3x3 conv fprop on 64 channels, one output row a tile (kernels/conv_rows_sm90.py), fused epilogue.

The implicit-GEMM fprop (conv_implicit.py) with another kernel: where the
conv is ResNet-50's conv2_3x3 kind (C = 64, K <= 64, 3x3, padding 1, unit
stride, rows of at most 64 pixels) x's rows come through L2 once per filter
row and the filter stays in shared memory. Everything else -- dtypes,
layouts, the bias / activation regions it claims -- is the implicit
builder's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cute.conv_implicit import ConvChain, CuteConvImplicitBuilder, ImplicitConv, plan_conv
from sigdnn.plan_builders.cute.gemm_layout import GemmConfig
from sigdnn.plan_builders.cute.matmul import device_id_of, device_properties
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device

ROWS_CONFIG = GemmConfig(64, 64, True)  # one output row by 64 output channels, each warpgroup its own
MAX_Q = 64  # an M tile is one output row
CHANNELS = 64


def rows_reason(view: ImplicitConv) -> str | None:
    """Why the row conv cannot run this conv, or None when it can."""
    if view.rank != 2:
        return f"{view.rank}-D convolution; the row conv takes 2-D"
    c, k, r, s, _, q, *rest = view.geometry[3:]
    if c != CHANNELS or k > CHANNELS or (r, s) != (3, 3):
        return (f"{c} input and {k} output channels, a {r}x{s} filter; the row conv takes {CHANNELS} input "
                f"channels, up to {CHANNELS} output, 3x3")  # fmt: skip
    if tuple(rest) != (1, 1, 1, 1, 1, 1, 1, 1):
        return "padding, stride or dilation other than 1; the row conv takes padding 1, unit stride and dilation"
    if q > MAX_Q:
        return f"{q} output columns; the row conv takes up to {MAX_Q} (one row a 64-pixel tile)"
    return None


class CuteConvRowsBuilder(CuteConvImplicitBuilder):
    """2-D NHWC 3x3 conv fprop on 64 channels, sm_90: a tile per output row, the filter resident."""

    name = "cute.conv_fprop_rows"
    engine_id = IN_TREE[name]
    priority = 2  # above cute.conv_fprop_implicit where both apply

    def plan(self, node: Node, graph: Graph, chain: ConvChain | None = None) -> ImplicitConv:
        view = plan_conv(node, graph, chain)
        reason = rows_reason(view)
        if reason is not None:
            raise NotSupported(f"node '{node.name}': {reason}")
        return view

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        return [ROWS_CONFIG.label]

    def _launch(self, view: ImplicitConv, device: Device, label: str | None, where: str) -> Any:
        from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch

        _, sm_count = device_properties(device_id_of(device))
        return ConvLaunch(view.spec, ROWS_CONFIG, view.geometry, sm_count, "fprop_rows")
