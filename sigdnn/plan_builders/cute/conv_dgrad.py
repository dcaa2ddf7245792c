"""CuTe DSL conv dgrad on Hopper: the implicit-GEMM conv fprop run over dy with the flipped filter.

With every stride 1,

    dx[n, h, w, c] = sum over (k, r, s) of dy[n, h + ph - r*dh, w + pw - s*dw, k] * w[k, r, s, c]
                   = sum over (r', s', k) of dy[n, h - ph' + r'*dh, w - pw' + s'*dw, k] * w'[c, r', s', k]

with w'[c, r', s', k] = w[k, R-1-r', S-1-s', c] and padding ph' = (R-1)*dh - ph
(each side its own): a conv fprop of dy (K channels in, C out). A small
kernel writes w' into the workspace (kernels/filter_flip.py), then the
implicit-GEMM fprop (kernels/conv_sm90.py) runs with dy as its input.

A stride above 1 is the same over dy with stride - 1 zeros inserted
between its pixels (kernels/zero_insert.py writes that to the workspace
too): dy_z[n, u, v, k] = dy[n, u / sh, v / sw, k] where the strides divide
(u, v), else 0, of extent ((P-1)*sh + 1, (Q-1)*sw + 1), and the padding
after becomes H - 1 - (P-1)*sh + ph (the rows of dx past dy's last
window read only padding). It spends sh*sw times the MACs of the strided
products on zeros -- simple and exact, not fast; one GEMM per stride
phase would not.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from typing import Any

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_dgrad import ConvDgrad
from sigdnn.plan_builders.cute.bound import BindsLaunches, check_aligned, in_order
from sigdnn.plan_builders.cute.conv import IN_DTYPES, channels_last
from sigdnn.plan_builders.cute.conv_implicit import ImplicitConv, check_geometry, default_conv_config
from sigdnn.plan_builders.cute.gemm_layout import C_DTYPES, ITEMSIZE, GemmSpec
from sigdnn.plan_builders.cute.matmul import (
    config_override,
    device_id_of,
    device_properties,
    require_hopper,
    unavailable_reason,
)
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

_ALIGN = 256  # workspace regions start on 256-byte boundaries


def inserted_extent(extent: int, stride: int) -> int:
    """A spatial extent of dy after stride - 1 zeros go between neighbours."""
    return (extent - 1) * stride + 1


def plan_dgrad(node: Node, graph: Graph) -> ImplicitConv:
    """The conv fprop (over dy, with the flipped filter) a dgrad node runs as, or NotSupported saying why."""
    op = node.op
    where = f"node '{node.name}'"
    if not isinstance(op, ConvDgrad):
        raise NotSupported(f"{where}: not a conv_dgrad")
    dy, w, dx = graph.tensors[op.dy], graph.tensors[op.w], graph.tensors[op.dx]
    dtypes = [str(graph.dtype_of(t)) for t in (dy, w, dx)]
    compute = str(graph.compute_dtype_of(node))
    if compute != "float32":
        raise NotSupported(f"{where}: compute dtype {compute}; supported: float32")
    if dtypes[0] not in IN_DTYPES or dtypes[1] != dtypes[0] or dtypes[2] not in C_DTYPES:
        raise NotSupported(f"{where}: dtypes dy {dtypes[0]}, w {dtypes[1]}, dx {dtypes[2]}; supported: dy and w "
                           f"both float16 or bfloat16, dx one of {', '.join(C_DTYPES)}")  # fmt: skip
    if len(op.stride) != 2:
        raise NotSupported(f"{where}: {len(op.stride)}-D convolution; supported: 2-D")
    n, c, h, wd = dx.dims
    k, cg, r, s = w.dims
    _, _, p, q = dy.dims
    if cg != c:
        raise NotSupported(f"{where}: grouped convolution ({c // cg} groups); supported: 1 group")
    for t in (dy, w, dx):
        if not channels_last(t.dims, t.strides):
            raise NotSupported(f"{where}: tensor '{t.name}' is not packed channels-last (NHWC); strides {t.strides}")
    (ph, pw), (dh, dw), (sh, sw) = op.pre_padding, op.dilation, op.stride
    pz, qz = inserted_extent(p, sh), inserted_extent(q, sw)
    pads = ((r - 1) * dh - ph, (s - 1) * dw - pw, h - pz + ph, wd - qz + pw)
    if min(pads) < 0:
        raise NotSupported(f"{where}: padding {op.pre_padding} / {op.post_padding} beyond the filter's reach "
                           f"({r}x{s}, dilation {op.dilation}): dx pixels no window covers")  # fmt: skip
    # The fprop's view: input dy, zeros inserted (N, Pz, Qz, K channels), filter w' (C out, R, S, K), output
    # dx (N, H, W, C).
    geometry = (n, pz, qz, k, c, r, s, h, wd, *pads, 1, 1, dh, dw)
    check_geometry(where, geometry, dtypes[2], dy.size, w.size, dx.size, n * pz * qz * k)
    return ImplicitConv(GemmSpec(dtypes[0], dtypes[1], dtypes[2], "k", "k", "n", False, False), geometry)


class CuteConvDgradPlan(BindsLaunches, NodePlan):
    """Flip the filter into the workspace (and, strided, dy with zeros inserted after it), then the
    implicit-GEMM fprop over dy into dx."""

    def __init__(self, flip: Any, insert: Any, conv: Any, workspace: tuple[int, int], where: str) -> None:
        self._flip = flip
        self._insert = insert
        self._conv = conv
        self._dy_offset = workspace[0]  # the zero-inserted dy's start: past the flipped filter
        self.workspace_bytes = sum(workspace)
        self._where = where

    @property
    def config(self) -> Any:
        return self._conv.config

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        dy, w, dx = buffers["dy"], buffers["w"], buffers["dx"]
        check_aligned(self._where, dy=dy, w=w, dx=dx)
        flipped = context.workspace.ptr
        launches = [functools.partial(self._flip, w.ptr, flipped, context.stream)]
        source = dy.ptr
        if self._insert is not None:
            source = flipped + self._dy_offset
            launches.append(functools.partial(self._insert, dy.ptr, source, context.stream))
        launches.append(functools.partial(self._conv, source, flipped, dx.ptr, context.stream))
        return in_order(*launches)


class CuteConvDgradBuilder(PlanBuilder):
    """2-D NHWC conv dgrad on sm_90: filter flip (strided: and zeros into dy) + the implicit-GEMM conv fprop."""

    name = "cute.conv_dgrad"
    engine_id = IN_TREE[name]
    library = "cute"
    device = "gpu"
    ops = ("conv_dgrad",)

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        ins, outs = dict(key.inputs), dict(key.outputs)
        return (
            key.op == "conv_dgrad"
            and key.trait("spatial_rank") == 2
            and str(ins.get("dy")) in IN_DTYPES
            and str(ins.get("w")) == str(ins.get("dy"))
            and str(outs.get("dx")) in C_DTYPES
            and str(key.compute) == "float32"
        )

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        plan_dgrad(node, graph)
        require_hopper(node, device)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch
        from sigdnn.plan_builders.cute.kernels.filter_flip import FilterFlipLaunch
        from sigdnn.plan_builders.cute.kernels.zero_insert import ZeroInsertLaunch

        self.check(node, graph, context.device)
        view = plan_dgrad(node, graph)
        _, sm_count = device_properties(device_id_of(context.device))
        config = config_override() or default_conv_config(view, sm_count)
        conv = ConvLaunch(view.spec, config, view.geometry, sm_count)
        k, c, r, s = graph.tensors[node.op.w].dims[:4]
        dtype, itemsize = view.spec.a_dtype, ITEMSIZE[view.spec.a_dtype]
        flip = FilterFlipLaunch(dtype, (k, r, s, c))
        filter_bytes = -(-k * c * r * s * itemsize // _ALIGN) * _ALIGN
        insert, inserted_bytes = None, 0
        if node.op.stride != (1, 1):
            n, _, p, q = graph.tensors[node.op.dy].dims
            insert = ZeroInsertLaunch(dtype, (n, p, q, k), node.op.stride)
            inserted_bytes = math.prod(view.geometry[:4]) * itemsize  # (N, Pz, Qz, K)
        return CuteConvDgradPlan(flip, insert, conv, (filter_bytes, inserted_bytes), f"node '{node.name}'")
