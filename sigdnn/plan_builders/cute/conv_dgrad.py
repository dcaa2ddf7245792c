"""CuTe DSL conv dgrad on Hopper: the implicit-GEMM conv fprop run over dy with the flipped filter.

With every stride 1,

    dx[n, h, w, c] = sum over (k, r, s) of dy[n, h + ph - r*dh, w + pw - s*dw, k] * w[k, r, s, c]
                   = sum over (r', s', k) of dy[n, h - ph' + r'*dh, w - pw' + s'*dw, k] * w'[c, r', s', k]

with w'[c, r', s', k] = w[k, R-1-r', S-1-s', c] and padding ph' = (R-1)*dh - ph
(each side its own): a conv fprop of dy (K channels in, C out). A small
kernel writes w' into the workspace (kernels/filter_flip.py), then the
implicit-GEMM fprop (kernels/conv_sm90.py) runs with dy as its input.

A stride above 1 runs by stride phases (dgrad_phases.py): dx[n, sh*i + p,
sw*j + q, c] for each (p, q) is a stride-1 conv of dy with the sub-filter of
the taps that reach it. One kernel gathers every sub-filter into the
workspace (kernels/phase_dgrad.py), the implicit-GEMM fprop runs once per
phase some tap reaches, each into its own region of the workspace, and one
interleave kernel writes every element of dx from them (zeros where no tap
reaches). The fprop's TMA store takes a flattened (N*Hp*Wp) x C tile, and a
phase's rows are not one box of dx (they skip sh - 1 rows of every sh), so
the phases go through the workspace: 2 x dx's bytes more traffic than a
strided-store epilogue would move, but no MAC on an inserted zero (the
zero insertion this replaces spent sh*sw times the MACs) and the GEMM
kernel, shared by every GEMM and conv, unchanged.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_dgrad import ConvDgrad
from sigdnn.plan_builders.cute import unavailable_reason
from sigdnn.plan_builders.cute.bound import BindsLaunches, check_aligned, in_order
from sigdnn.plan_builders.cute.conv import IN_DTYPES, channels_last
from sigdnn.plan_builders.cute.conv_geometry import ImplicitConv, check_geometry
from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config
from sigdnn.plan_builders.cute.dgrad_phases import ALIGN, Phase, PhaseLayout, phase_layout, stride_phases
from sigdnn.plan_builders.cute.gemm_layout import C_DTYPES, ITEMSIZE, GemmSpec
from sigdnn.plan_builders.cute.matmul import config_override
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties, require_hopper
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

_INT32_MAX = 2**31 - 1


@attrs.frozen
class PhasedDgrad:
    """A strided dgrad's plan: its phases, their workspace, and each running phase's fprop (None elsewhere)."""

    phases: tuple[Phase, ...]
    layout: PhaseLayout
    convs: tuple[ImplicitConv | None, ...]

    @property
    def views(self) -> list[ImplicitConv]:
        return [v for v in self.convs if v is not None]


def plan_dgrad(node: Node, graph: Graph) -> ImplicitConv | PhasedDgrad:
    """The conv fprop over dy with the flipped filter a unit-stride dgrad runs as, or a strided dgrad's phases;
    NotSupported saying why not."""
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
    spec = GemmSpec(dtypes[0], dtypes[1], dtypes[2], "k", "k", "n", False, False)
    (ph, pw), (dh, dw), (sh, sw) = op.pre_padding, op.dilation, op.stride
    if (sh, sw) != (1, 1):
        return _plan_phases(where, spec, (n, c, h, wd, k, r, s, p, q), op, (dy.size, w.size, dx.size))
    pads = ((r - 1) * dh - ph, (s - 1) * dw - pw, h - p + ph, wd - q + pw)
    if min(pads) < 0:
        raise NotSupported(f"{where}: padding {op.pre_padding} / {op.post_padding} beyond the filter's reach "
                           f"({r}x{s}, dilation {op.dilation}): dx pixels no window covers")  # fmt: skip
    # The fprop's view: input dy (N, P, Q, K channels), filter w' (C out, R, S, K), output dx (N, H, W, C).
    geometry = (n, p, q, k, c, r, s, h, wd, *pads, 1, 1, dh, dw)
    check_geometry(where, geometry, dtypes[2], dy.size, w.size, dx.size)
    return ImplicitConv(spec, geometry)


def _plan_phases(
    where: str, spec: GemmSpec, extents: tuple[int, ...], op: ConvDgrad, sizes: tuple[int, ...]
) -> PhasedDgrad:
    """A strided dgrad's stride phases, each running phase's fprop view checked as the kernel needs it."""
    n, c, h, wd, k, r, s, p, q = extents
    phases = stride_phases((h, wd), (p, q), (r, s), op.pre_padding, op.stride, op.dilation)
    layout = phase_layout(phases, n, c, k, s, ITEMSIZE[spec.a_dtype], ITEMSIZE[spec.c_dtype])
    if layout.workspace_bytes // ITEMSIZE[spec.a_dtype] > _INT32_MAX:
        raise NotSupported(f"{where}: a phase workspace of {layout.workspace_bytes} bytes, past 32-bit offsets")
    convs: list[ImplicitConv | None] = []
    for phase in phases:
        if not phase.runs:
            convs.append(None)
            continue
        a, b = phase.h, phase.w
        # Phase (p, q) as an fprop: input dy (N, P, Q, K), filter (C out, Rp, Sp, K), output (N, Hp, Wp, C).
        geometry = (n, p, q, k, c, len(a.taps), len(b.taps), a.out, b.out, a.pre, b.pre, a.post, b.post, 1, 1,
                    a.dilation, b.dilation)  # fmt: skip
        check_geometry(f"{where} (stride phase {a.phase}, {b.phase})", geometry, spec.c_dtype, *sizes)
        convs.append(ImplicitConv(spec, geometry))
    return PhasedDgrad(phases, layout, tuple(convs))


class CuteConvDgradPlan(BindsLaunches, NodePlan):
    """Flip the filter into the workspace, then the implicit-GEMM fprop over dy into dx (unit stride)."""

    def __init__(self, flip: Any, conv: Any, filter_bytes: int, where: str) -> None:
        self._flip = flip
        self._conv = conv
        self.workspace_bytes = filter_bytes
        self._where = where

    @property
    def config(self) -> Any:
        return self._conv.config

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        dy, w, dx = buffers["dy"], buffers["w"], buffers["dx"]
        check_aligned(self._where, dy=dy, w=w, dx=dx)
        flipped = context.workspace.ptr
        return in_order(
            functools.partial(self._flip, w.ptr, flipped, context.stream),
            functools.partial(self._conv, dy.ptr, flipped, dx.ptr, context.stream),
        )


class CuteConvDgradPhasePlan(BindsLaunches, NodePlan):
    """A strided dgrad: gather the sub-filters into the workspace, one fprop per running phase into the
    workspace, then the interleave into dx."""

    def __init__(self, gather: Any, convs: list[tuple[Any, int, int]], interleave: Any, workspace_bytes: int,
                 where: str) -> None:  # fmt: skip
        self._gather = gather
        self._convs = convs  # (launch, sub-filter offset, output offset), offsets in workspace bytes
        self._interleave = interleave
        self.workspace_bytes = workspace_bytes
        self._where = where

    @property
    def config(self) -> Any:
        """The last running phase's fprop config (None if no phase runs): what benchmarks print."""
        return self._convs[-1][0].config if self._convs else None

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        dy, w, dx = buffers["dy"], buffers["w"], buffers["dx"]
        check_aligned(self._where, dy=dy, w=w, dx=dx)
        work, stream = context.workspace.ptr, context.stream
        launches = [] if self._gather is None else [functools.partial(self._gather, w.ptr, work, stream)]
        for conv, f_off, y_off in self._convs:
            launches.append(functools.partial(conv, dy.ptr, work + f_off, work + y_off, stream))
        launches.append(functools.partial(self._interleave, work, dx.ptr, stream))
        return in_order(*launches)


class CuteConvDgradBuilder(PlanBuilder):
    """2-D NHWC conv dgrad on sm_90: filter flip + the implicit-GEMM conv fprop over dy; strided, by phases."""

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

        self.check(node, graph, context.device)
        where = f"node '{node.name}'"
        plan = plan_dgrad(node, graph)
        _, sm_count = device_properties(device_id_of(context.device))

        def launch(view: ImplicitConv) -> Any:
            return ConvLaunch(view.spec, config_override() or default_conv_config(view, sm_count), view.geometry,
                              sm_count)  # fmt: skip

        k, c, r, s = graph.tensors[node.op.w].dims
        if isinstance(plan, ImplicitConv):
            from sigdnn.plan_builders.cute.kernels.filter_flip import FilterFlipLaunch

            flip = FilterFlipLaunch(plan.spec.a_dtype, (k, r, s, c))
            filter_bytes = -(-k * c * r * s * ITEMSIZE[plan.spec.a_dtype] // ALIGN) * ALIGN
            return CuteConvDgradPlan(flip, launch(plan), filter_bytes, where)
        from sigdnn.plan_builders.cute.kernels.phase_dgrad import PhaseGatherLaunch, PhaseInterleaveLaunch

        layout = plan.layout
        in_dtype = str(graph.dtype_of(graph.tensors[node.op.dy]))
        out_dtype = str(graph.dtype_of(graph.tensors[node.op.dx]))
        span = layout.workspace_bytes
        gather = None  # no phase runs: dx is all zeros
        if layout.gather:
            gather = PhaseGatherLaunch(in_dtype, layout.gather, k, r * s, c, span // ITEMSIZE[in_dtype])
        n, _, h, wd = graph.tensors[node.op.dx].dims
        interleave = PhaseInterleaveLaunch(out_dtype, layout.interleave, (n, h, wd, c), node.op.stride,
                                           span // ITEMSIZE[out_dtype])  # fmt: skip
        convs = [
            (launch(view), f_off, y_off)
            for view, f_off, y_off in zip(plan.convs, layout.filters, layout.outputs, strict=True)
            if view is not None
        ]
        return CuteConvDgradPhasePlan(gather, convs, interleave, layout.workspace_bytes, where)
