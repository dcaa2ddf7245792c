"""CuTe DSL conv wgrad on Hopper: dw = dy^T x im2col(x), a split-K GEMM.

    dw[k, (r, s, c)] = sum over (n, p, q) of dy[(n, p, q), k] * A[(n, p, q), (r, s, c)]

A is the conv fprop's im2col matrix of x (kernels/im2col.py writes it to the
workspace; a 1x1 unit-stride unpadded conv reads x in place). The GEMM's
output (K x RSC) is small next to its depth (N*P*Q), so the depth is cut
into equal slices run as one batched GEMM writing float32 partials, which
kernels/splitk_reduce.py adds and rounds once into dw. dy^T is dy read
M-major and A is read N-major: no transpose is materialized.

With C not a multiple of 8 (the 3-channel first layer of an image model)
A's rows are padded with zeros to a multiple of 8 (the element-per-thread
im2col), the GEMM and reduction write dw with those padded rows into the
workspace, and the same kernel copies the real R*S*C columns into dw.
An im2col matrix past ``batch_slices.IM2COL_BUDGET`` runs in waves of whole
images through one wave's workspace, each wave's GEMM writing its own
slices' partials (the stem at batch 64: 8 waves of 29 MiB, not 233 MiB).

A first, correct version: the im2col pass writes R*S times x's size and the
GEMM reads it back. ``cute.conv_wgrad_implicit`` (below) saves that pass
when C is a multiple of 64: B's tiles come through the TMA's im2col mode
(kernels/conv_wgrad_sm90.py); it ranks first where it applies.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_wgrad import ConvWgrad
from sigdnn.plan_builders.cute import unavailable_reason
from sigdnn.plan_builders.cute.batch_slices import batch_slices
from sigdnn.plan_builders.cute.bound import BindsLaunches, check_aligned, in_order
from sigdnn.plan_builders.cute.conv import IN_DTYPES, channels_last
from sigdnn.plan_builders.cute.conv_geometry import check_geometry, row_kernel_reason
from sigdnn.plan_builders.cute.conv_wgrad_model import (
    ALTERNATIVES,
    MIN_SLICE,
    TILE_K,
    TILE_N,
    WgradShape,
    best_splits,
    ranked_configs,
    slice_steps,
    split_choices,
    wgrad_tile_configs,
)
from sigdnn.plan_builders.cute.gemm_layout import C_DTYPES, ITEMSIZE, GemmConfig, GemmProblem, GemmSpec, plan_gemm
from sigdnn.plan_builders.cute.matmul import config_override, named_config
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties, planning_sm_count, require_hopper
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

_INT32_MAX = 2**31 - 1
_ALIGN = 256  # workspace regions start on 256-byte boundaries


@attrs.frozen
class WgradGemm:
    """A conv wgrad as (im2col,) a batched split-K GEMM (and a reduction)."""

    spec: GemmSpec
    problem: GemmProblem
    im2col: tuple[int, ...] | None  # the im2col kernel's 14 extents; None: B is x itself
    splits: int
    dtype: str  # x's and dy's
    out_dtype: str
    npq: int
    k: int
    rsc: int  # the GEMM's N: R*S*C, padded to a multiple of 8 when C is not one
    unpadded: int | None  # R*S*C when the rows were padded (dw is written from a padded copy)
    waves: int  # batch slices, each an im2col then the GEMM over its splits // waves slices (batch_slices.py)
    wave_bytes: tuple[int, int]  # x's and dy's bytes a wave

    @property
    def im2col_bytes(self) -> int:
        return 0 if self.im2col is None else _aligned(self.npq // self.waves * self.rsc * ITEMSIZE[self.dtype])

    @property
    def wave_parts_bytes(self) -> int:
        """One wave's share of the float32 partial sums (its splits // waves slices)."""
        return self.splits // self.waves * self.k * self.rsc * 4

    @property
    def parts_bytes(self) -> int:
        return _aligned(self.splits * self.k * self.rsc * 4) if self.splits > 1 else 0

    @property
    def workspace_bytes(self) -> int:
        padded_dw = 0 if self.unpadded is None else self.k * self.rsc * ITEMSIZE[self.out_dtype]
        return self.im2col_bytes + self.parts_bytes + padded_dw

    @property
    def unpad_extents(self) -> tuple[int, ...] | None:
        """The narrow im2col's extents that copy dw's real columns out of its padded rows."""
        if self.unpadded is None:
            return None
        return (self.k, 1, 1, self.rsc, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, self.unpadded)


def _aligned(nbytes: int) -> int:
    return -(-nbytes // _ALIGN) * _ALIGN


def split_count(npq: int, tiles: int, sm_count: int) -> int:
    """Slices of the reduction: enough tiles for two waves, each slice at least MIN_SLICE deep, slices equal
    (a divisor of npq: a batched GEMM's slices all have one extent) and 16-byte aligned (multiples of 8)."""
    target = max(1, min(math.ceil(2 * sm_count / tiles), npq // MIN_SLICE))
    for d in range(target, 1, -1):
        if npq % d == 0 and (npq // d) % 8 == 0:
            return d
    return 1


def plan_wgrad(node: Node, graph: Graph, sm_count: int = 132, config: GemmConfig | None = None) -> WgradGemm:
    """The GEMM view of a wgrad node, or NotSupported saying why."""
    op = node.op
    where = f"node '{node.name}'"
    if not isinstance(op, ConvWgrad):
        raise NotSupported(f"{where}: not a conv_wgrad")
    x, dy, dw = graph.tensors[op.x], graph.tensors[op.dy], graph.tensors[op.dw]
    dtypes = [str(graph.dtype_of(t)) for t in (x, dy, dw)]
    compute = str(graph.compute_dtype_of(node))
    if compute != "float32":
        raise NotSupported(f"{where}: compute dtype {compute}; supported: float32")
    if dtypes[0] not in IN_DTYPES or dtypes[1] != dtypes[0] or dtypes[2] not in C_DTYPES:
        raise NotSupported(f"{where}: dtypes x {dtypes[0]}, dy {dtypes[1]}, dw {dtypes[2]}; supported: x and dy "
                           f"both float16 or bfloat16, dw one of {', '.join(C_DTYPES)}")  # fmt: skip
    if len(op.stride) != 2:
        raise NotSupported(f"{where}: {len(op.stride)}-D convolution; supported: 2-D")
    n, c, h, wd = x.dims
    k, cg, r, s = dw.dims
    _, _, p, q = dy.dims
    if cg != c:
        raise NotSupported(f"{where}: grouped convolution ({c // cg} groups); supported: 1 group")
    for t in (x, dy, dw):
        if not channels_last(t.dims, t.strides):
            raise NotSupported(f"{where}: tensor '{t.name}' is not packed channels-last (NHWC); strides {t.strides}")
    if k % 8:
        raise NotSupported(f"{where}: {k} output channels; supported: multiples of 8 (16-byte rows)")
    narrow = c % 8 != 0
    npq, rsc = n * p * q, r * s * c
    if narrow:
        rsc = -(-rsc // 8) * 8  # A's and dw's rows padded to 16 bytes
    if max(x.size, dy.size, dw.size, npq * rsc) > _INT32_MAX:
        raise NotSupported(f"{where}: tensors or the im2col matrix past 2^31 - 1 elements")
    direct = not narrow and (r, s) == (1, 1) and op.stride == (1, 1) and op.pre_padding == (0, 0) and (p, q) == (h, wd)
    config = config or GemmConfig(tile_m=128, tile_n=128)
    tiles = math.ceil(k / config.tile_m) * math.ceil(rsc / config.tile_n)
    splits = split_count(npq, tiles, sm_count)
    chunk = npq // splits
    out = dtypes[2] if splits == 1 else "float32"
    # waves need the split-K partial sums (one reduction adds every wave's) and whole slices in each wave
    waves = 1 if direct or splits == 1 else batch_slices(n, p * q * rsc * ITEMSIZE[dtypes[0]], divides=splits)
    try:
        spec, problem = plan_gemm(
            ((splits // waves, k, chunk), (chunk * k, 1, k), dtypes[1]),
            ((splits // waves, chunk, rsc), (chunk * rsc, rsc, 1), dtypes[0]),
            ((splits // waves, k, rsc), (k * rsc, rsc, 1), out),
        )
    except ValueError as exc:
        raise NotSupported(f"{where}: {exc}") from None
    im2col = None if direct else (n // waves, h, wd, c, p, q, r, s, *op.pre_padding, *op.stride, *op.dilation)
    if narrow:
        im2col = (*im2col, rsc)
    wave_bytes = (x.size // waves * ITEMSIZE[dtypes[0]], dy.size // waves * ITEMSIZE[dtypes[1]])
    unpadded = r * s * c if narrow else None
    return WgradGemm(spec, problem, im2col, splits, dtypes[0], dtypes[2], npq, k, rsc, unpadded, waves, wave_bytes)


class CuteConvWgradPlan(BindsLaunches, NodePlan):
    """im2col into the workspace (unless B is x), the split-K GEMM, then the reduction into dw (into its padded
    copy, then ``unpad`` into dw, when C is not a multiple of 8)."""

    def __init__(self, view: WgradGemm, im2col: Any, gemm: Any, reduce: Any, where: str, unpad: Any = None) -> None:
        self._view = view
        self._im2col = im2col
        self._gemm = gemm
        self._reduce = reduce
        self._unpad = unpad
        self.workspace_bytes = view.workspace_bytes
        self._where = where

    @property
    def config(self) -> GemmConfig:
        return self._gemm.config

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        x, dy, dw = buffers["x"], buffers["dy"], buffers["dw"]
        check_aligned(self._where, x=x, dy=dy, dw=dw)
        stream = context.stream
        view, work = self._view, context.workspace.ptr if self.workspace_bytes else 0
        target = dw.ptr if self._unpad is None else work + view.im2col_bytes + view.parts_bytes
        parts = target if self._reduce is None else work + view.im2col_bytes
        (x_step, dy_step), launches = view.wave_bytes, []
        for i in range(view.waves):
            b = x.ptr
            if self._im2col is not None:
                b = work
                launches.append(functools.partial(self._im2col, x.ptr + i * x_step, b, stream))
            launches.append(
                functools.partial(self._gemm, dy.ptr + i * dy_step, b, parts + i * view.wave_parts_bytes, stream)
            )
        if self._reduce is not None:
            launches.append(functools.partial(self._reduce, parts, target, stream))
        if self._unpad is not None:
            launches.append(functools.partial(self._unpad, target, dw.ptr, stream))
        return in_order(*launches)


class CuteConvWgradBuilder(PlanBuilder):
    """2-D NHWC conv wgrad on sm_90: im2col + split-K Hopper GEMM + reduction."""

    name = "cute.conv_wgrad"
    engine_id = IN_TREE[name]
    library = "cute"
    device = "gpu"
    ops = ("conv_wgrad",)

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        ins, outs = dict(key.inputs), dict(key.outputs)
        return (
            key.op == "conv_wgrad"
            and key.trait("spatial_rank") == 2
            and str(ins.get("x")) in IN_DTYPES
            and str(ins.get("dy")) == str(ins.get("x"))
            and str(outs.get("dw")) in C_DTYPES
            and str(key.compute) == "float32"
        )

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        plan_wgrad(node, graph)
        require_hopper(node, device)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        from sigdnn.plan_builders.cute.kernels.im2col import Im2colLaunch
        from sigdnn.plan_builders.cute.kernels.launch import GemmLaunch
        from sigdnn.plan_builders.cute.kernels.splitk_reduce import SplitKReduceLaunch

        self.check(node, graph, context.device)
        _, sm_count = device_properties(device_id_of(context.device))
        view = plan_wgrad(node, graph, sm_count, config_override())
        config = config_override() or GemmConfig(tile_m=128, tile_n=128)
        gemm = GemmLaunch(view.spec, config, view.problem, sm_count)
        im2col = None if view.im2col is None else Im2colLaunch(view.dtype, view.im2col)
        reduce = None if view.splits == 1 else SplitKReduceLaunch(view.out_dtype, view.k * view.rsc, view.splits)
        unpad = None if view.unpad_extents is None else Im2colLaunch(view.out_dtype, view.unpad_extents)
        return CuteConvWgradPlan(view, im2col, gemm, reduce, f"node '{node.name}'", unpad)


@attrs.frozen
class ImplicitWgrad:
    """A conv wgrad as the implicit-GEMM wgrad kernel's launch: spec, geometry, slice length and count."""

    spec: GemmSpec
    config: GemmConfig
    geometry: tuple[int, ...]  # as conv_geometry.ImplicitConv's (x, dw's K, the fprop's output extents)
    chunk: int  # pixels a slice: whole K steps (the last slice's may run past N*P*Q)
    splits: int
    out_dtype: str
    shape: WgradShape
    kind: str = "wgrad"  # the conv kernel (conv_launch.KINDS): "wgrad_rows" reads x a row at a time

    @property
    def workspace_bytes(self) -> int:
        return self.splits * self.shape.k * self.shape.rsc * 4 if self.splits > 1 else 0


def plan_wgrad_implicit(
    node: Node, graph: Graph, sm_count: int = 132, config: GemmConfig | None = None, splits: int | None = None
) -> ImplicitWgrad:
    """The implicit-GEMM view of a wgrad node (B through the TMA's im2col mode), or NotSupported saying why.

    ``config`` and ``splits`` default to the model's choice (``ranked_configs``, ``best_splits``)."""
    plan_wgrad(node, graph, sm_count)  # dtypes, rank, groups, layouts, channel alignment
    op = node.op
    where = f"node '{node.name}'"
    x, dy, dw = graph.tensors[op.x], graph.tensors[op.dy], graph.tensors[op.dw]
    n, c, h, wd = x.dims
    k, _, r, s = dw.dims
    _, _, p, q = dy.dims
    if c % TILE_N:
        raise NotSupported(f"{where}: {c} input channels; the implicit wgrad needs a multiple of {TILE_N} (its N "
                           "tiles are 64-channel blocks of filter taps)")  # fmt: skip
    dtype, out = str(graph.dtype_of(x)), str(graph.dtype_of(dw))
    geometry = (n, h, wd, c, k, r, s, p, q, *op.pre_padding, *op.post_padding, *op.stride, *op.dilation)
    check_geometry(where, geometry, dtype, x.size, dy.size, dw.size)
    npq, rsc = n * p * q, r * s * c
    shape = WgradShape(k, rsc, npq, (x.size + dy.size) * ITEMSIZE[dtype])
    config = config or ranked_configs(shape, sm_count)[0]
    if config not in wgrad_tile_configs(k, rsc):
        raise NotSupported(f"{where}: tile config {config.label}; the implicit wgrad takes "
                           f"{', '.join(c.label for c in wgrad_tile_configs(k, rsc))} for dw {k} x {rsc}")  # fmt: skip
    splits = splits or best_splits(shape, config, sm_count)
    if splits not in split_choices(npq):
        raise NotSupported(f"{where}: {splits} slices of {npq} output pixels; supported: {split_choices(npq)}")
    c_dtype = out if splits == 1 else "float32"
    spec = GemmSpec(dtype, dtype, c_dtype, "m", "n", "n", True, True)
    return ImplicitWgrad(spec, config, geometry, slice_steps(npq, splits) * TILE_K, splits, out, shape)


class CuteConvWgradImplicitPlan(BindsLaunches, NodePlan):
    """The implicit-GEMM wgrad into dw (one slice) or into float32 partials, then the reduction."""

    def __init__(self, view: ImplicitWgrad, conv: Any, reduce: Any, where: str) -> None:
        self._conv = conv
        self._reduce = reduce
        self.workspace_bytes = view.workspace_bytes
        self._where = where

    @property
    def config(self) -> GemmConfig:
        return self._conv.config

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        x, dy, dw = buffers["x"], buffers["dy"], buffers["dw"]
        check_aligned(self._where, x=x, dy=dy, dw=dw)
        if self._reduce is None:
            return functools.partial(self._conv, dy.ptr, x.ptr, dw.ptr, context.stream)
        parts = context.workspace.ptr
        return in_order(
            functools.partial(self._conv, dy.ptr, x.ptr, parts, context.stream),
            functools.partial(self._reduce, parts, dw.ptr, context.stream),
        )


class CuteConvWgradImplicitBuilder(CuteConvWgradBuilder):
    """2-D NHWC conv wgrad on sm_90 as an implicit GEMM: B's tiles through the TMA's im2col mode, split-K."""

    name = "cute.conv_wgrad_implicit"
    engine_id = IN_TREE[name]
    priority = 1  # above cute.conv_wgrad: no im2col pass

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        plan_wgrad_implicit(node, graph)
        super().check(node, graph, device)

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        """Labels worth measuring: the default (or the environment's override) first, then the next
        ALTERNATIVES the model ranks best, each run with its own best slice count."""
        view = plan_wgrad_implicit(nodes[0], graph, planning_sm_count(device), config_override())
        labels = [view.config.label]
        ranked = [c.label for c in ranked_configs(view.shape, planning_sm_count(device))]
        return labels + [label for label in ranked if label not in labels][:ALTERNATIVES]

    def view(self, node: Node, graph: Graph, sm_count: int, label: str | None, where: str) -> ImplicitWgrad:
        """The launch this builder makes of the node: the configuration ``label`` names (autotune's choice),
        else the environment's override, else the model's."""
        return plan_wgrad_implicit(node, graph, sm_count, named_config(label, where) or config_override())

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch
        from sigdnn.plan_builders.cute.kernels.splitk_reduce import SplitKReduceLaunch

        self.check(node, graph, context.device)
        where = f"node '{node.name}'"
        _, sm_count = device_properties(device_id_of(context.device))
        view = self.view(node, graph, sm_count, context.config, where)
        conv = ConvLaunch(view.spec, view.config, (*view.geometry, view.chunk, view.splits), sm_count, view.kind)
        total = view.shape.k * view.shape.rsc
        reduce = None if view.splits == 1 else SplitKReduceLaunch(view.out_dtype, total, view.splits)
        return CuteConvWgradImplicitPlan(view, conv, reduce, where)


ROWS_CONFIG = GemmConfig(64, 3 * TILE_N, True)  # the row wgrad's one tile: the three taps of a filter row
ROWS_MAX_Q = 64  # a K step is one output row: Q pixels of the 64-deep step


def rows_reason(geometry: tuple[int, ...]) -> str | None:
    """Why the row wgrad (kernels/conv_wgrad_rows_sm90.py) cannot run this conv, or None when it can."""
    reason = row_kernel_reason(geometry, "row wgrad")
    if reason is not None:
        return reason
    q = geometry[8]
    if q > ROWS_MAX_Q:
        return f"{q} output columns; the row wgrad takes up to {ROWS_MAX_Q} (one row a 64-pixel K step)"
    return None


def row_slices(rows: int) -> list[int]:
    """Slice counts for ``rows`` output rows: each ceil(rows / S) rows, none empty."""
    return [d for d in range(1, rows + 1) if -(-rows // -(-rows // d)) == d]


def plan_wgrad_rows(node: Node, graph: Graph, sm_count: int = 132, splits: int | None = None) -> ImplicitWgrad:
    """The row wgrad's view of a node (one slice count), or NotSupported saying why.

    ``splits`` defaults to one wave of tiles: as many slices as the SMs hold
    the filter's row tiles for (the measured choice, benchmarks/README.md)."""
    base = plan_wgrad_implicit(node, graph, sm_count, splits=1)  # dtypes, layouts, sizes
    reason = rows_reason(base.geometry)
    if reason is not None:
        raise NotSupported(f"node '{node.name}': {reason}")
    n, p = base.geometry[0], base.geometry[7]
    rows = n * p
    tiles = math.ceil(base.shape.k / ROWS_CONFIG.tile_m) * 3  # an N tile a filter row
    choices = row_slices(rows)
    if splits is None:
        splits = max(d for d in choices if d * tiles <= max(sm_count, tiles))
    if splits not in choices:
        raise NotSupported(f"node '{node.name}': {splits} slices of {rows} rows; supported: {choices}")
    c_dtype = base.out_dtype if splits == 1 else "float32"
    spec = attrs.evolve(base.spec, c_dtype=c_dtype)
    chunk = -(-rows // splits) * TILE_K
    return attrs.evolve(base, spec=spec, config=ROWS_CONFIG, chunk=chunk, splits=splits, kind="wgrad_rows")


class CuteConvWgradRowsBuilder(CuteConvWgradImplicitBuilder):
    """3x3 NHWC conv wgrad on 64 channels, sm_90: x read one row a K step, the three taps from shared memory."""

    name = "cute.conv_wgrad_rows"
    engine_id = IN_TREE[name]
    priority = 2  # above cute.conv_wgrad_implicit: a third of its L2 traffic where both apply

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        plan_wgrad_rows(node, graph)
        CuteConvWgradBuilder.check(self, node, graph, device)

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        return [ROWS_CONFIG.label]

    def view(self, node: Node, graph: Graph, sm_count: int, label: str | None, where: str) -> ImplicitWgrad:
        return plan_wgrad_rows(node, graph, sm_count)
