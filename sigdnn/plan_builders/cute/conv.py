"""CuTe DSL conv fprop builder for Hopper: 2-D, NHWC, bfloat16 / float16 in, float32 accumulation, as a GEMM.

    y[(n, p, q), k] = sum over (r, s, c) of A[(n, p, q), (r, s, c)] * w[k, (r, s, c)]

with x, w and y packed channels-last (x NHWC, w KRSC, y NHWK in memory;
the graph's dims stay [N, C, H, W] etc.). A is x itself when the filter is
1x1 with unit stride and no padding; otherwise the im2col kernel writes it
to the workspace (padding as zeros, any stride and dilation) and the Hopper
GEMM (kernels/gemm_sm90.py) multiplies it by the filter, read K-major as it
is stored, straight into y. With C not a multiple of 8 (an image model's
3-channel first layer, whose rows the TMA cannot read), A's rows of
R * S * C are padded with zeros to a multiple of 8 and the filter is copied
into the workspace with the same padded rows, by an element-per-thread
im2col; the zeros add nothing to the sums. An im2col matrix past
``batch_slices.IM2COL_BUDGET`` runs in batch slices through one slice's
workspace (the stem at batch 64: 8 slices of 29 MiB, not 233 MiB). The first version, correct before fast:
``cute.conv_fprop_implicit`` (conv_implicit.py) gathers A's tiles inside
the GEMM instead and ranks above this builder, which stays for what the
TMA's im2col mode cannot express.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.cute import unavailable_reason
from sigdnn.plan_builders.cute.batch_slices import batch_slices
from sigdnn.plan_builders.cute.bound import BindsLaunches, check_aligned, in_order
from sigdnn.plan_builders.cute.gemm_layout import C_DTYPES, ITEMSIZE, GemmProblem, GemmSpec, default_config, plan_gemm
from sigdnn.plan_builders.cute.matmul import config_override
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties, require_hopper
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

IN_DTYPES = ("float16", "bfloat16")
_INT32_MAX = 2**31 - 1


@attrs.frozen
class ConvGemm:
    """A conv fprop as a GEMM: its kernel view, and the im2col extents (None: A is x itself)."""

    spec: GemmSpec
    problem: GemmProblem  # one batch slice's GEMM
    im2col: tuple[int, ...] | None  # n, h, w, c, p, q, r, s, pad_h, pad_w, stride_h, stride_w, dil_h, dil_w[, kpad]
    dtype: str
    filter_padding: tuple[int, ...] | None  # the filter's im2col extents when C is not a multiple of 8
    slices: int  # batch slices run one after the other through one slice's im2col matrix (batch_slices.py)
    slice_bytes: tuple[int, int]  # x's and y's bytes a slice

    @property
    def a_bytes(self) -> int:
        """A's size in the workspace (the padded filter follows it, 16-byte aligned: K is a multiple of 8)."""
        return 0 if self.im2col is None else self.problem.m * self.problem.k * ITEMSIZE[self.dtype]

    @property
    def workspace_bytes(self) -> int:
        padded_filter = 0 if self.filter_padding is None else self.problem.n * self.problem.k * ITEMSIZE[self.dtype]
        return self.a_bytes + padded_filter


def channels_last(dims: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Packed [N, C, H, W] dims stored N, H, W, C (a dim of extent 1 may carry any stride)."""
    _, c, h, w = dims
    want = (h * w * c, 1, w * c, c)
    return all(d == 1 or s == e for d, s, e in zip(dims, strides, want, strict=True))


def fprop_operands(node: Node, graph: Graph) -> tuple[Tensor, Tensor, Tensor, list[str]]:
    """x, w, y and their dtypes of a conv fprop the CuTe GEMM convs take (2-D, packed NHWC, x and w of one 16-bit
    dtype, float32 compute, one group), or NotSupported saying why."""
    op = node.op
    where = f"node '{node.name}'"
    if not isinstance(op, ConvFprop):
        raise NotSupported(f"{where}: not a conv_fprop")
    x, w, y = graph.tensors[op.x], graph.tensors[op.w], graph.tensors[op.y]
    dtypes = [str(graph.dtype_of(t)) for t in (x, w, y)]
    compute = str(graph.compute_dtype_of(node))
    if compute != "float32":
        raise NotSupported(f"{where}: compute dtype {compute}; supported: float32")
    if dtypes[0] not in IN_DTYPES or dtypes[1] != dtypes[0] or dtypes[2] not in C_DTYPES:
        raise NotSupported(f"{where}: dtypes x {dtypes[0]}, w {dtypes[1]}, y {dtypes[2]}; supported: x and w both "
                           f"float16 or bfloat16, y one of {', '.join(C_DTYPES)}")  # fmt: skip
    if op.spatial_rank != 2:
        raise NotSupported(f"{where}: {op.spatial_rank}-D convolution; supported: 2-D")
    if w.dims[1] != x.dims[1]:
        raise NotSupported(f"{where}: grouped convolution ({x.dims[1] // w.dims[1]} groups); supported: 1 group")
    for t in (x, w, y):
        if not channels_last(t.dims, t.strides):
            raise NotSupported(f"{where}: tensor '{t.name}' is not packed channels-last (NHWC); strides {t.strides}")
    return x, w, y, dtypes


def conv_gemm(node: Node, graph: Graph) -> ConvGemm:
    """The GEMM a conv fprop node becomes, or NotSupported saying why."""
    x, w, y, dtypes = fprop_operands(node, graph)
    op, where = node.op, f"node '{node.name}'"
    n, c, h, wd = x.dims
    k, _, r, s = w.dims
    _, _, p, q = y.dims
    narrow = c % 8 != 0
    m, kg = n * p * q, r * s * c
    if narrow:
        kg = -(-kg // 8) * 8  # A's and the filter's rows padded to 16 bytes
    if max(x.size, w.size, y.size, m * kg, k * kg) > _INT32_MAX:
        raise NotSupported(f"{where}: tensors or the im2col matrix past 2^31 - 1 elements")
    direct = not narrow and (r, s) == (1, 1) and op.stride == (1, 1) and op.pre_padding == (0, 0) and (p, q) == (h, wd)
    slices = 1 if direct else batch_slices(n, p * q * kg * ITEMSIZE[dtypes[0]])
    m //= slices
    try:
        spec, problem = plan_gemm(
            ((m, kg), (kg, 1), dtypes[0]), ((kg, k), (1, kg), dtypes[1]), ((m, k), (k, 1), dtypes[2])
        )
    except ValueError as exc:
        raise NotSupported(f"{where}: {exc}") from None
    im2col = filter_padding = None
    if not direct:
        im2col = (n // slices, h, wd, c, p, q, r, s, *op.pre_padding, *op.stride, *op.dilation)
    if narrow:  # the filter as a 1 x 1 image of R * S * C channels, rows padded like A's
        im2col = (*im2col, kg)
        filter_padding = (k, 1, 1, r * s * c, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, kg)
    slice_bytes = (x.size // slices * ITEMSIZE[dtypes[0]], y.size // slices * ITEMSIZE[dtypes[2]])
    return ConvGemm(spec, problem, im2col, dtypes[0], filter_padding, slices, slice_bytes)


class CuteConvFpropPlan(BindsLaunches, NodePlan):
    """im2col into the workspace (unless A is x itself), the filter padded after A when C is not a multiple of 8,
    then the GEMM into y."""

    def __init__(self, view: ConvGemm, gemm: Any, im2col: Any, where: str, pad_filter: Any = None) -> None:
        self._view = view
        self._gemm = gemm
        self._im2col = im2col
        self.workspace_bytes = view.workspace_bytes
        self._where = where
        self._pad_filter = pad_filter

    @property
    def config(self) -> Any:
        return self._gemm.config

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        x, w, y = buffers["x"], buffers["w"], buffers["y"]
        check_aligned(self._where, x=x, w=w, y=y)
        if self._im2col is None:
            return functools.partial(self._gemm, x.ptr, w.ptr, y.ptr, context.stream)
        a, stream = context.workspace.ptr, context.stream
        b, launches = w.ptr, []
        if self._pad_filter is not None:
            b = a + self._view.a_bytes
            launches.append(functools.partial(self._pad_filter, w.ptr, b, stream))
        x_step, y_step = self._view.slice_bytes
        for i in range(self._view.slices):
            launches.append(functools.partial(self._im2col, x.ptr + i * x_step, a, stream))
            launches.append(functools.partial(self._gemm, a, b, y.ptr + i * y_step, stream))
        return in_order(*launches)


class CuteConvFpropBuilder(PlanBuilder):
    """2-D NHWC conv fprop on sm_90: im2col + the TMA / wgmma GEMM."""

    name = "cute.conv_fprop"
    engine_id = IN_TREE[name]
    library = "cute"
    device = "gpu"
    ops = ("conv_fprop",)

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        ins, outs = dict(key.inputs), dict(key.outputs)
        return (
            key.op == "conv_fprop"
            and key.trait("spatial_rank") == 2
            and str(ins.get("x")) in IN_DTYPES
            and str(ins.get("w")) == str(ins.get("x"))
            and str(outs.get("y")) in C_DTYPES
            and str(key.compute) == "float32"
        )

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        conv_gemm(node, graph)
        require_hopper(node, device)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        from sigdnn.plan_builders.cute.kernels.im2col import Im2colLaunch
        from sigdnn.plan_builders.cute.kernels.launch import GemmLaunch

        self.check(node, graph, context.device)
        view = conv_gemm(node, graph)
        _, sm_count = device_properties(device_id_of(context.device))
        config = config_override() or default_config(view.spec, view.problem, sm_count)
        gemm = GemmLaunch(view.spec, config, view.problem, sm_count)
        im2col = None if view.im2col is None else Im2colLaunch(view.dtype, view.im2col)
        pad_filter = None if view.filter_padding is None else Im2colLaunch(view.dtype, view.filter_padding)
        return CuteConvFpropPlan(view, gemm, im2col, f"node '{node.name}'", pad_filter)
