"""CuTe DSL conv fprop as an implicit GEMM on Hopper: no im2col pass, A gathered by the TMA in im2col mode.

2-D and 3-D, NHWC / NDHWC, bfloat16 / float16 in, float32 accumulation, 16- or 32-bit out,
one group, any padding (asymmetric too), stride up to 8 and dilation (see
kernels/conv_sm90.py for the kernel). As a fusion builder it also claims
``conv_fprop -> add(bias) -> activation`` chains (each step optional; relu,
gelu, gelu_approx_tanh) whose intermediates are virtual and read by the next
step alone, with the bias one value per output channel: the GEMM epilogue
adds it and applies the activation in float32, and only the chain's last
tensor is written.

It ranks above ``cute.conv_fprop`` (im2col into a workspace, then the GEMM),
which stays for what the TMA's im2col mode cannot express.

Layers with too few output tiles for the SMs (late stages: M = N*P*Q of a
few thousand, a deep K loop) split each tile's K loop across CTAs inside the
kernel, or only the tiles of a last, mostly empty wave; stream-K is offered
to autotune (config labels ``k2``, ``t2``, ``x``; ``split_k_plan``). The
float32 partials and the tile counters live in a workspace the launch owns.
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
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.pointwise import Pointwise
from sigdnn.plan_builders.cute import unavailable_reason
from sigdnn.plan_builders.cute.bound import BindsLaunches, check_aligned
from sigdnn.plan_builders.cute.conv import IN_DTYPES
from sigdnn.plan_builders.cute.gemm_layout import ACTIVATIONS, BIAS_DTYPES, C_DTYPES, ITEMSIZE, GemmConfig, GemmSpec
from sigdnn.plan_builders.cute.matmul import _plain_relu, _sole_reader, config_override, named_config, region_chain
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties, planning_sm_count, require_hopper
from sigdnn.registry.contracts import BuildContext, FusionBuilder, NodePlan, RegionContext, RegionPlan
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.registry.regions import Dataflow, Region, make_region
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

_INT32_MAX = 2**31 - 1
# TMA im2col box corners by conv rank: a rank-4 tensor takes [-128, 127], rank 5 [-16, 15] (cuTensorMapEncodeIm2col)
_CORNERS = {2: (-128, 127), 3: (-16, 15)}
_MAX_STRIDE = 8  # the im2col traversal stride (the conv stride) is at most 8
_MAX_OFFSET = 2**16 - 1  # a load's filter-tap offset is a 16-bit value
K_TILE = 64  # channels per K step of the 16-bit kernel (kernels/gemm_sm90.py's tile_k)


@attrs.frozen
class ConvChain:
    """A conv node and the pointwise nodes its epilogue absorbs (node indices, uids)."""

    nodes: tuple[int, ...]  # conv first
    writes: tuple[int, ...]  # the uid each node writes; the last is what the kernel stores
    bias: int | None = None
    activation: str = "none"


@attrs.frozen
class ImplicitConv:
    """A conv fprop in the kernel's terms: its spec (dtypes, epilogue) and the launch scalars.

    ``geometry`` is, for spatial dims ``sp`` (H, W in 2-D; D, H, W in 3-D):
    n, *input extents, c, k, *filter taps, *output extents, *pre padding,
    *post padding, *stride, *dilation -- 17 scalars in 2-D, 24 in 3-D.
    """

    spec: GemmSpec
    geometry: tuple[int, ...]

    @property
    def rank(self) -> int:
        return (len(self.geometry) - 3) // 7

    @property
    def m(self) -> int:
        return self.geometry[0] * math.prod(unpack(self.geometry)["out"])

    @property
    def k_out(self) -> int:
        return self.geometry[2 + self.rank]

    @property
    def k_tiles(self) -> int:
        """K steps of the GEMM: 64-channel blocks times filter taps."""
        g = unpack(self.geometry)
        return math.ceil(g["c"] / K_TILE) * math.prod(g["taps"])


def unpack(geometry: tuple[int, ...]) -> dict[str, Any]:
    """The named parts of a geometry tuple (see ImplicitConv)."""
    rank = (len(geometry) - 3) // 7
    if len(geometry) != 3 + 7 * rank or rank not in (2, 3):
        raise ValueError(f"a conv geometry has 17 (2-D) or 24 (3-D) scalars, got {len(geometry)}")
    parts = {"n": geometry[0], "c": geometry[1 + rank], "k": geometry[2 + rank]}
    parts["in"] = geometry[1 : 1 + rank]
    rest = geometry[3 + rank :]
    for i, name in enumerate(("taps", "out", "pre", "post", "stride", "dilation")):
        parts[name] = tuple(rest[i * rank : (i + 1) * rank])
    return parts


def row_kernel_reason(geometry: tuple[int, ...], kernel: str) -> str | None:
    """Why a row kernel (x read a row at a time, a filter row's taps as shifted views of it: 3x3 on 64
    channels, padding 1, unit stride and dilation) cannot run a 2-D conv of this geometry, or None."""
    parts = unpack(geometry)
    if parts["c"] != 64 or parts["taps"] != (3, 3):
        r, s = parts["taps"]
        return f"{parts['c']} input channels, a {r}x{s} filter; the {kernel} takes 64 channels, 3x3"
    if any(v != 1 for name in ("pre", "post", "stride", "dilation") for v in parts[name]):
        return f"padding, stride or dilation other than 1; the {kernel} takes padding 1, unit stride and dilation"
    return None


@attrs.frozen
class SplitK:
    """How a split-K or stream-K launch cuts the work (kernels/gemm_sm90.py): launch scalars and workspace.

    The first ``whole`` tiles run unsplit. Split-K: each later tile's K loop
    is cut into ``splits`` ranges, all but the last of which park a float32
    partial tile. Stream-K (``sk_segments`` > 0, the most tiles one SM's
    range touches): the later tiles' K iterations are cut into one range per
    SM, and each range that starts inside a tile parks that part. ``slots``
    partial tiles of ``tile_elems`` floats, one int32 counter per split tile.
    """

    splits: int
    whole: int
    sk_segments: int
    slots: int
    counters: int
    tile_elems: int

    @property
    def partial_bytes(self) -> int:
        return self.slots * self.tile_elems * 4

    @property
    def workspace_bytes(self) -> int:
        """Partials, then the counters (which must start at zero; the kernel leaves them at zero)."""
        return self.partial_bytes + 4 * self.counters


def split_k_plan(geometry: tuple[int, ...], config: GemmConfig, sm_count: int) -> SplitK:
    """The split of a conv fprop under a split config: split-K has at most one range per K tile and, with
    ``split_tail``, splits only the tiles past the last full wave of ``sm_count``; stream-K leaves all but
    the last full wave whole (as CUTLASS's data-parallel + stream-K hybrid) and spreads the rest over
    ``sm_count`` ranges. ValueError past the kernel's 32-bit index arithmetic."""
    g = unpack(geometry)
    m = g["n"] * math.prod(g["out"])
    tiles = math.ceil(m / config.tile_m) * math.ceil(g["k"] / config.tile_n)
    k_tiles = math.ceil(g["c"] / K_TILE) * math.prod(g["taps"])
    elems = config.tile_m * config.tile_n
    if config.stream_k:
        whole = max(0, tiles // sm_count - 1) * sm_count
        total = (tiles - whole) * k_tiles
        longest = -(-total // min(total, sm_count))
        segments = (longest + k_tiles - 2) // k_tiles + 1
        plan = SplitK(0, whole, segments, sm_count, tiles - whole, elems)
        if total * sm_count > _INT32_MAX:
            raise ValueError(f"{config.label}: {total} stream-K iterations, past the kernel's 32-bit arithmetic")
    else:
        splits = min(config.split_k, k_tiles)
        whole = tiles // sm_count * sm_count if config.split_tail else 0
        split_tiles = tiles - whole if splits > 1 else 0
        plan = SplitK(splits, whole, 0, split_tiles * (splits - 1), split_tiles, elems)
    if plan.slots * plan.tile_elems > _INT32_MAX:
        raise ValueError(f"{config.label}: {plan.slots} partial tiles, past the kernel's 32-bit workspace offsets")
    return plan


def _is_channel_bias(graph: Graph, uid: int, k: int) -> bool:
    """One value per output channel: dims (1, K, 1, 1) (or 1, K, 1, 1, 1), contiguous along K."""
    t = graph.tensors[uid]
    return (
        t.value is None
        and t.rank in (4, 5)
        and t.dims[1] == k
        and all(d == 1 for i, d in enumerate(t.dims) if i != 1)
        and (k == 1 or t.strides[1] == 1)
        and str(graph.dtype_of(t)) in BIAS_DTYPES
    )


def epilogue_chain(graph: Graph, flow: Dataflow, i: int) -> ConvChain | None:
    """The longest conv -> [add bias] -> [activation] chain starting at node ``i`` (None: nothing to fuse)."""
    node = graph.nodes[i]
    if not isinstance(node.op, ConvFprop):
        return None
    k = graph.tensors[node.op.y].dims[1]
    nodes, writes, bias, activation = [i], [node.op.y], None, "none"
    out = node.op.y
    j = _sole_reader(graph, flow, out)
    if j is not None and isinstance(graph.nodes[j].op, Pointwise) and graph.nodes[j].op.mode == "add":
        op = graph.nodes[j].op
        other = op.in_1 if op.in_0 == out else op.in_0
        if op.in_0 != op.in_1 and _is_channel_bias(graph, other, k):
            nodes, out, bias = [*nodes, j], op.out_0, other
            writes.append(out)
            j = _sole_reader(graph, flow, out)
    if j is not None and isinstance(graph.nodes[j].op, Pointwise):
        op = graph.nodes[j].op
        if op.mode in ACTIVATIONS and (op.mode != "relu_fwd" or _plain_relu(op)):
            nodes, out, activation = [*nodes, j], op.out_0, ACTIVATIONS[op.mode]
            writes.append(out)
    if len(nodes) == 1 or any(str(graph.compute_dtype_of(graph.nodes[n])) != "float32" for n in nodes):
        return None
    return ConvChain(tuple(nodes), tuple(writes), bias, activation)


def check_geometry(where: str, geometry: tuple[int, ...], out_dtype: str, *sizes: int) -> None:
    """NotSupported unless the kernel's TMA loads and stores can express this conv (see conv_sm90.py)."""
    g = unpack(geometry)
    c, k, rank = g["c"], g["k"], len(g["in"])
    if c % 8:
        raise NotSupported(f"{where}: {c} input channels; supported: multiples of 8 (16-byte rows for the TMA)")
    align = 16 // ITEMSIZE[out_dtype]
    if k % align:
        raise NotSupported(f"{where}: {k} output channels; a {out_dtype} output needs a multiple of {align} "
                           "(16-byte rows)")  # fmt: skip
    if max(*sizes, g["n"] * math.prod(g["out"])) > _INT32_MAX:
        raise NotSupported(f"{where}: tensors past 2^31 - 1 elements")
    if max(g["stride"]) > _MAX_STRIDE:
        raise NotSupported(f"{where}: stride {g['stride']}; the TMA's im2col mode takes strides up to {_MAX_STRIDE}")
    # The output extents the TMA walks: the box from -pad to (extent - 1 + post_pad - (taps - 1) * dilation).
    reach = [(t - 1) * d for t, d in zip(g["taps"], g["dilation"], strict=True)]
    low, high = _CORNERS[rank]
    for corner in (*(-x for x in g["pre"]), *(x - r for x, r in zip(g["post"], reach, strict=True))):
        if not low <= corner <= high:
            raise NotSupported(f"{where}: padding {g['pre']} / {g['post']} with filter {g['taps']} and dilation "
                               f"{g['dilation']} puts an im2col box corner at {corner}, outside [{low}, {high}] "
                               f"(the TMA's range for a {rank}-D convolution)")  # fmt: skip
    if max(reach) > _MAX_OFFSET:
        raise NotSupported(f"{where}: filter taps reach past the TMA's 16-bit im2col offsets")
    want = tuple(
        (x + a + b - r - 1) // st + 1
        for x, a, b, r, st in zip(g["in"], g["pre"], g["post"], reach, g["stride"], strict=True)
    )
    if g["out"] != want:
        raise NotSupported(f"{where}: output spatial dims {g['out']}, the TMA's im2col walk gives {want}")


def channels_last_nd(dims: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Packed [N, C, spatial...] dims stored N, spatial..., C (a dim of extent 1 may carry any stride)."""
    c, spatial = dims[1], dims[2:]
    want = [c * math.prod(spatial), 1]
    want += [c * math.prod(spatial[i + 1 :]) for i in range(len(spatial))]
    return all(d == 1 or s == e for d, s, e in zip(dims, strides, want, strict=True))


def plan_conv(node: Node, graph: Graph, chain: ConvChain | None = None) -> ImplicitConv:
    """The kernel's view of a conv fprop (writing the chain's last tensor when fused), or NotSupported."""
    op = node.op
    where = f"node '{node.name}'"
    if not isinstance(op, ConvFprop):
        raise NotSupported(f"{where}: not a conv_fprop")
    x, w = graph.tensors[op.x], graph.tensors[op.w]
    y = graph.tensors[op.y if chain is None else chain.writes[-1]]
    dtypes = [str(graph.dtype_of(t)) for t in (x, w, y)]
    compute = str(graph.compute_dtype_of(node))
    if compute != "float32":
        raise NotSupported(f"{where}: compute dtype {compute}; supported: float32")
    if dtypes[0] not in IN_DTYPES or dtypes[1] != dtypes[0] or dtypes[2] not in C_DTYPES:
        raise NotSupported(f"{where}: dtypes x {dtypes[0]}, w {dtypes[1]}, y {dtypes[2]}; supported: x and w both "
                           f"float16 or bfloat16, y one of {', '.join(C_DTYPES)}")  # fmt: skip
    if op.spatial_rank not in (2, 3):
        raise NotSupported(f"{where}: {op.spatial_rank}-D convolution; supported: 2-D and 3-D")
    n, c, *spatial = x.dims
    k, cg, *taps = w.dims
    if cg != c:
        raise NotSupported(f"{where}: grouped convolution ({c // cg} groups); supported: 1 group")
    for t in (x, w, y):
        if not channels_last_nd(t.dims, t.strides):
            raise NotSupported(f"{where}: tensor '{t.name}' is not packed channels-last (NHWC / NDHWC); "
                               f"strides {t.strides}")  # fmt: skip
    geometry = (n, *spatial, c, k, *taps, *y.dims[2:], *op.pre_padding, *op.post_padding, *op.stride, *op.dilation)
    check_geometry(where, geometry, dtypes[2], x.size, w.size, y.size)
    spec = GemmSpec(dtypes[0], dtypes[1], dtypes[2], "k", "k", "n", False, False)
    if chain is not None:
        outs = [str(graph.dtype_of(graph.tensors[u])) for u in chain.writes]
        if any(d not in C_DTYPES for d in outs):
            raise NotSupported(f"{where}: epilogue tensors of dtypes {outs}")
        spec = attrs.evolve(
            spec,
            bias_dtype=None if chain.bias is None else str(graph.dtype_of(graph.tensors[chain.bias])),
            activation=chain.activation,
            round_x=outs[0] if len(outs) > 1 else "float32",
            # The chain's last tensor needs no rounding of its own: the store rounds to it.
            round_y=outs[1] if chain.bias is not None and len(outs) > 2 else "float32",
        )
    return ImplicitConv(spec, geometry)


# Configurations autotune measures besides the default (``CuteConvImplicitBuilder.configs``): the wide
# cooperative tiles, cooperative and pingpong 128x128, each the default for some ResNet-50 layer shape on the
# H200 (benchmarks/gpu_cute.py --parts convi), then the wide tile's split-K /
# stream-K variants (``split_alternatives``). Clustered tiles, 128x64 and pingpong 64-row tiles ran 0.12-0.67x
# the default there and are not offered (pingpong 128x64 is the fused default's own choice on 256x64 tiles).
CONV_ALTERNATIVES = (
    "coop256x64c1x1s1",
    "coop256x128c1x1s1",
    "coop128x256c1x1s1",
    "coop128x128c1x1s1",
    "pp128x128c1x1s1",
)
SPLIT_MIN_K_TILES = 8  # split a tile's K loop only when each half keeps a pipeline's worth of K steps
SQUARE_TILE = (128, 128)
# A 128x128 tile's time per output element over a wide tile's on the H200's ResNet-50 layers: 1.15-1.33 with the
# K counters, 1.04-1.10 once the producer had no division left; 1.25 picks each
# layer's faster tile in both runs but conv4_1x1_expand's in the second (128x128 3 % faster there).
SQUARE_COST = 1.25


def _wide_tile(view: ImplicitConv) -> tuple[int, int]:
    k = view.k_out
    return (256, 64) if k <= 64 else (256, 128) if k <= 128 else (128, 256)


def _tiles(view: ImplicitConv, tile: tuple[int, int]) -> int:
    return math.ceil(view.m / tile[0]) * math.ceil(view.k_out / tile[1])


def _chosen_tile(view: ImplicitConv, sm_count: int) -> tuple[int, int]:
    """The wide tile, or 128x128 where its waves of tiles cost less: each wave costs its tile's area, a
    128x128 one SQUARE_COST times more per element (fewer products per operand byte)."""
    wide = _wide_tile(view)
    if view.k_out < 128:
        return wide

    def cost(tile: tuple[int, int], factor: float) -> float:
        return math.ceil(_tiles(view, tile) / sm_count) * tile[0] * tile[1] * factor

    return SQUARE_TILE if cost(SQUARE_TILE, SQUARE_COST) < cost(wide, 1.0) else wide


def default_conv_config(view: ImplicitConv, sm_count: int = 132) -> GemmConfig:
    """The tile config without tuning (a stated heuristic, measured by
    benchmarks/gpu_cute.py --parts convi).

    Cooperative tiles as wide as the output channels allow -- 256x64 for
    K <= 64, 256x128 for K <= 128, else 128x256 -- unless 128x128 tiles
    fill the SMs' waves better (_chosen_tile): on the H200 at batch 64,
    conv3_3x3 1.28x cuDNN in three waves of 128x128 against 1.08x in two
    of 256x128, conv5_3x3 and conv5_1x1_reduce one wave of 100 tiles
    instead of 50 (0.92x and 1.00x against 0.90x and 0.79x split in two),
    while conv4_3x3's one wave of 98 wide tiles beat two of 128x128 (1.10x
    against 0.92x). When the tiles would still leave more than half the SMs
    idle and the K loop is at least SPLIT_MIN_K_TILES deep, the same tiles
    with the K loop split in two (twice the CTAs); a shallow K loop takes
    pingpong 128x128 tiles instead. A unit-stride conv whose last wave of
    tiles is at most half full splits that wave's tiles in two (conv3_3x3
    in 256x128 tiles: 1.07x); strided ones ran slower so (0.96x), their
    input being 4x their output. A fused epilogue on 256x64 tiles runs
    pingpong 128x64 tiles instead.
    """
    tile_m, tile_n = _chosen_tile(view, sm_count)
    tiles = _tiles(view, (tile_m, tile_n))
    deep = view.k_tiles >= SPLIT_MIN_K_TILES
    if tiles < sm_count // 2:
        if deep:
            return GemmConfig(tile_m=tile_m, tile_n=tile_n, split_k=2)
        return GemmConfig(tile_m=128, tile_n=128, pingpong=True)
    unit_stride = all(st == 1 for st in unpack(view.geometry)["stride"])
    if deep and unit_stride and tiles > sm_count and 0 < tiles % sm_count <= sm_count // 2:
        return GemmConfig(tile_m=tile_m, tile_n=tile_n, split_k=2, split_tail=True)
    fused = view.spec.bias_dtype is not None or view.spec.activation != "none"
    if fused and (tile_m, tile_n) == (256, 64):
        # One consumer warpgroup's epilogue overlaps the other's mainloop: conv2_3x3 + bias + relu (9 K steps
        # a tile) 1.007x cuDNN-frontend's fused graph in pingpong 128x64 tiles against 0.984x cooperative
        # 256x64 in the same run; the plain conv stays cooperative (2 % faster).
        return GemmConfig(tile_m=128, tile_n=64, pingpong=True)
    return GemmConfig(tile_m=tile_m, tile_n=tile_n)


def split_alternatives(view: ImplicitConv, sm_count: int = 132) -> list[str]:
    """The wide tile split in two, its last wave split in two, and stream-K: what autotune may find faster
    where the default does not split (conv4_3x3 ran stream-K 1.04x faster; see default_conv_config)."""
    if view.k_tiles < 2:
        return []
    tile = _wide_tile(view)
    base = GemmConfig(tile_m=tile[0], tile_n=tile[1])
    found = [attrs.evolve(base, split_k=2), attrs.evolve(base, stream_k=True)]
    if _tiles(view, tile) > sm_count:
        found.insert(1, attrs.evolve(base, split_k=2, split_tail=True))
    return [config.label for config in found]


class CuteConvPlan(BindsLaunches, NodePlan):
    """One conv node: the specialization and every launch scalar fixed at build."""

    workspace_bytes = 0

    def __init__(self, launch: Any, where: str) -> None:
        self._launch = launch
        self._where = where

    @property
    def config(self) -> GemmConfig:
        return self._launch.config

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        return _bound(self._launch, self._where, buffers["x"], buffers["w"], buffers["y"], None, context)


class CuteConvEpiloguePlan(BindsLaunches, RegionPlan):
    """A conv + bias + activation region as one launch; buffers keyed by uid."""

    workspace_bytes = 0

    def __init__(self, launch: Any, where: str, x: int, w: int, out: int, bias: int | None) -> None:
        self._launch = launch
        self._where = where
        self._uids = (x, w, out, bias)

    @property
    def config(self) -> GemmConfig:
        return self._launch.config

    def bind(self, buffers: Mapping[int, Any], context: ExecutionContext) -> Callable[[], None]:
        x, w, out, bias = self._uids
        return _bound(self._launch, self._where, buffers[x], buffers[w], buffers[out], buffers.get(bias), context)


def _bound(launch: Any, where: str, x: Any, w: Any, y: Any, bias: Any, context: ExecutionContext) -> Callable[[], None]:
    check_aligned(where, x=x, w=w, y=y)
    return functools.partial(launch, x.ptr, w.ptr, y.ptr, context.stream, 0 if bias is None else bias.ptr)


class CuteConvImplicitBuilder(FusionBuilder):
    """2-D / 3-D channels-last conv fprop on sm_90 as an implicit GEMM (TMA im2col + wgmma), fused epilogue."""

    name = "cute.conv_fprop_implicit"
    engine_id = IN_TREE[name]
    library = "cute"
    device = "gpu"
    ops = ("conv_fprop",)
    priority = 1  # above cute.conv_fprop: no workspace pass

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        ins, outs = dict(key.inputs), dict(key.outputs)
        return (
            key.op == "conv_fprop"
            and key.trait("spatial_rank") in (2, 3)
            and str(ins.get("x")) in IN_DTYPES
            and str(ins.get("w")) == str(ins.get("x"))
            and str(outs.get("y")) in C_DTYPES
            and str(key.compute) == "float32"
        )

    def plan(self, node: Node, graph: Graph, chain: ConvChain | None = None) -> ImplicitConv:
        """This builder's view of a conv (writing the chain's last tensor when fused), or NotSupported."""
        return plan_conv(node, graph, chain)

    def _check_device(self, node: Node, device: Device | None) -> None:
        require_hopper(node, device)

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        self.plan(node, graph)
        self._check_device(node, device)

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        """Labels worth measuring for this conv or conv epilogue region: the default (or the environment's
        override) first, then CONV_ALTERNATIVES and the split alternatives. The executor builds the first when
        nothing was measured."""
        view = self.plan(nodes[0], graph, region_chain(nodes, graph, epilogue_chain))
        sm_count = planning_sm_count(device)
        labels = [(config_override() or default_conv_config(view, sm_count)).label]
        offered = [*CONV_ALTERNATIVES, *split_alternatives(view, sm_count)]
        return labels + [label for label in offered if label not in labels]

    def _launch(self, view: ImplicitConv, device: Device, label: str | None, where: str) -> Any:
        """The compiled launch of the configuration ``label`` names (from ``configs``), else the default."""
        config = named_config(label, where)
        from sigdnn.plan_builders.cute.kernels.conv_launch import ConvLaunch

        _, sm_count = device_properties(device_id_of(device))
        config = config or config_override() or default_conv_config(view, sm_count)
        if config.split:
            try:
                split_k_plan(view.geometry, config, sm_count)
            except ValueError as exc:
                raise NotSupported(f"{where}: {exc}") from None
        return ConvLaunch(view.spec, config, view.geometry, sm_count)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        self.check(node, graph, context.device)
        where = f"node '{node.name}'"
        return CuteConvPlan(self._launch(self.plan(node, graph), context.device, context.config, where), where)

    # -- fusion ---------------------------------------------------------------

    def claim(self, graph: Graph, order: list[int], device: Device) -> list[Region]:
        if device.kind != "gpu" or self.available() is not None:
            return []
        flow = Dataflow(graph, order)
        regions = []
        for i in order:
            chain = epilogue_chain(graph, flow, i)
            if chain is None:
                continue
            try:
                self.plan(graph.nodes[i], graph, chain)
                self._check_device(graph.nodes[i], device)
            except NotSupported:
                continue
            regions.append(make_region(flow, chain.nodes))
        return regions

    def build_region(self, region: Region, graph: Graph, context: RegionContext) -> RegionPlan:
        flow = Dataflow(graph, list(region.nodes))
        chain = epilogue_chain(graph, flow, region.nodes[0])
        if chain is None or chain.nodes != region.nodes:
            names = [graph.nodes[i].name for i in region.nodes]
            raise NotSupported(f"region {names} is not a conv epilogue chain")
        node = graph.nodes[chain.nodes[0]]
        where = f"region {node.name}..{graph.nodes[chain.nodes[-1]].name}"
        launch = self._launch(self.plan(node, graph, chain), context.device, context.config, where)
        return CuteConvEpiloguePlan(launch, where, node.op.x, node.op.w, chain.writes[-1], chain.bias)
