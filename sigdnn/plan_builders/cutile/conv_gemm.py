"""cuTile convs as implicit GEMMs (``_conv_gemm_kernels.py``): fprop, dgrad and wgrad where the CuTe builders
decline.

The CuTe builders run 2-D NHWC convs with 16-bit inputs. What users export
from elsewhere is often none of that: an ONNX model from torchvision is
float32 NCHW, a signal model 1-D, a video model 3-D. This builder takes any
of them: 1 to 3 spatial dims, any layout or strides, any padding
(asymmetric too), stride and dilation, groups (each group its own GEMM
along the grid's third axis), f32 / f16 / bf16 io with float32 sums.
The filter's taps and channels are gathered into the GEMM's tiles inside
the kernel, so there is no workspace. x and w of one 16-bit dtype go to
``ct.mma`` as they are; otherwise both widen to float32, which cuTile
multiplies exactly where the node's compute dtype is float32, and as TF32
(10 mantissa bits, what torch's and ONNX Runtime's float32 convs run by
default) where it is 16-bit, whose tolerance covers it (as ``cutile.matmul``).

It ranks below every CuTe conv builder, ``cutile.conv_fprop_grouped`` (a
direct convolution, better for depthwise and narrow groups) and
``cutile.conv_fprop_1x1`` (tile loads), so it runs only what they decline.
dgrad and wgrad (the classes at the end) do the same for training: dgrad
gathers dy through each dx pixel's taps where the stride divides, wgrad
multiplies dy by x's windows over every dy pixel.

Where fprop's output tiles fill at most half the SMs (batch-1 inference: a
7x7 map of 512 channels is 8 tiles), K is split among blocks (``splits``):
partial sums in the workspace, added by a second kernel.
"""

from __future__ import annotations

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.tf32 import takes_tf32
from sigdnn.plan_builders.cutile.conv_grouped import (
    GRID_Y,
    LARGEST,
    channels_innermost,
    fits,
    groups_of,
    offset_bound,
    padded_to_3,
    view_5d,
)
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.pooling import as_5d
from sigdnn.plan_builders.cutile.source import KernelSource, literal
from sigdnn.plan_builders.cutile.steps import WORKSPACE, Arg, Launch
from sigdnn.plan_builders.cutile.tiling import cdiv, pow2
from sigdnn.plan_builders.gpu_properties import planning_sm_count
from sigdnn.registry.engine_ids import IN_TREE

TILE_PIXELS = 64  # TM: output pixels a block computes
MAX_TILE_CHANNELS = 64  # TN: output channels a block computes, at most
MIN_TILE = 16  # ct.mma's smallest tile side
TILE_REDUCTION = 32  # TK: the reduction indices one step gathers
NATIVE_MMA = ("float16", "bfloat16")
MIN_SPLIT_STEPS = 8  # K steps of TILE_REDUCTION a split-K block runs at least


def kernel_source(kernel: str = "conv_gemm") -> KernelSource:
    """The literal kernels' text with ``kernel`` bound to the one named."""
    return literal("_conv_gemm_kernels.py", kernel, kernel)


def tile_channels(k_per_group: int) -> int:
    """TN: a power of two covering the group's output channels, between ct.mma's 16 and 64."""
    return max(MIN_TILE, min(pow2(k_per_group), MAX_TILE_CHANNELS))


def splits(blocks: int, steps: int) -> int:
    """Blocks to split fprop's K steps among: 1 unless ``blocks`` (output tiles x groups) fill at most half the
    SMs; then enough to fill them, each running at least MIN_SPLIT_STEPS steps."""
    sms = planning_sm_count(None)  # H100 and H200 alike
    return 1 if 2 * blocks > sms else max(1, min(cdiv(sms, blocks), steps // MIN_SPLIT_STEPS))


def filter_tiles(w: Tensor, groups: int, channels_fastest: bool) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """w as the (groups, K/G, reduction) row-major view fprop's tile loads read, where w is dense in the kernel's
    j order (KCRS when taps run fastest, KRSC when channels do); None where it is not (the kernel gathers)."""
    dims, strides = as_5d(w)
    k, c, taps = dims[0], dims[1], dims[2] * dims[3] * dims[4]
    inner = (1, c * dims[3] * dims[4], c * dims[4], c) if channels_fastest else (taps, dims[3] * dims[4], dims[4], 1)
    want = (c * taps, *inner)
    if any(d > 1 and s != e for d, s, e in zip(dims, strides, want)):
        return None
    return (groups, k // groups, c * taps), (k // groups * c * taps, c * taps, 1)


def widens(graph: Graph, x: Tensor, w: Tensor) -> bool:
    """Whether the gathered tiles go to the MMA as float32: unless x and w share one 16-bit dtype."""
    dx, dw = str(graph.dtype_of(x)), str(graph.dtype_of(w))
    return not (dx == dw and dx in NATIVE_MMA)


def flat_span(t: Tensor) -> int:
    """Elements from t's first to its last (the flat view a kernel gathers from)."""
    dims, strides = view_5d(t)
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


def mma_flags(graph: Graph, node: Node, a: Tensor, b: Tensor) -> tuple[bool, bool]:
    """The kernels' WIDEN and TF32 constants for operands a and b."""
    return widens(graph, a, b), as_tf32(graph, node, a, b)


def as_tf32(graph: Graph, node: Node, a: Tensor, b: Tensor) -> bool:
    """Whether widened operands go to the MMA as TF32: where the node's compute dtype is 16-bit (whose tolerance
    covers TF32's 10-bit mantissa); operands of one 16-bit dtype multiply as they are either way."""
    return widens(graph, a, b) and takes_tf32(graph.compute_dtype_of(node))


def require_int32_spans(*tensors: Tensor) -> None:
    """ValueError unless each tensor's strides are >= 0 and its span fits the kernels' int32 offsets."""
    for t in tensors:
        if min(t.strides) < 0:
            raise ValueError(f"tensor '{t.name}' has negative strides {list(t.strides)}")
        if flat_span(t) > LARGEST:
            raise ValueError(f"tensor '{t.name}' spans 2^31 elements or more (int32 offsets)")


def grid_of(tiles: int, columns: int, tile: int, groups: int, what: str) -> tuple[int, int, int]:
    """(tiles, column tiles, groups); ValueError past CUDA's limit on a grid's second and third dims."""
    grid = (tiles, cdiv(columns, tile), groups)
    if grid[1] > GRID_Y or grid[2] > GRID_Y:
        raise ValueError(f"{columns} {what} a group in {groups} groups need a grid of {grid}; "
                         f"its second and third dims hold {GRID_Y}")  # fmt: skip
    return grid


def require_int32_scalars(constants: tuple[int, ...], *tails: int) -> None:
    """ValueError unless every scalar the kernel takes, and every index a tail tile forms (``tails``), fits int32."""
    largest = max(*constants, *tails)
    if largest > LARGEST:
        raise ValueError(f"a size, stride, padding or dilation of {largest} is past the kernel's int32 scalars")


class CutileConvGemmBuilder(CutileLaunchesBuilder):
    name = "cutile.conv_fprop_gemm"
    engine_id = IN_TREE[name]
    ops = ("conv_fprop",)
    priority = -2  # below the CuTe conv builders, cutile.conv_fprop_grouped and cutile.conv_fprop_1x1 where they apply

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        x, w, y = graph.tensors[op.x], graph.tensors[op.w], graph.tensors[op.y]
        groups = groups_of(node, graph)
        y_dims = as_5d(y)[0]
        pixels = y_dims[0] * y_dims[2] * y_dims[3] * y_dims[4]
        fits(x, w, y, op, pixels, TILE_PIXELS)
        k_total, c_per_group = y.dims[1], w.dims[1]
        k_per_group = k_total // groups
        w_dims = as_5d(w)[0]
        reduction = c_per_group * w_dims[2] * w_dims[3] * w_dims[4]
        tn = tile_channels(k_per_group)
        grid = grid_of(cdiv(pixels, TILE_PIXELS), k_per_group, tn, groups, "output channels")
        x_dims, x_strides = view_5d(x)
        constants = (
            pixels, *y_dims[2:],
            *x_dims[2:],
            k_total, k_per_group, c_per_group, reduction,
            *x_strides,
            *w_dims[2:],
            *padded_to_3(op.stride, 1),
            *padded_to_3(op.pre_padding, 0),
            *padded_to_3(op.dilation, 1),
        )  # fmt: skip
        require_int32_scalars(constants, reduction + TILE_REDUCTION)  # the last K step's j run a tile past it
        split = splits(grid[0] * grid[1] * grid[2], cdiv(reduction, TILE_REDUCTION))
        fastest = channels_innermost(x)
        tiles = filter_tiles(w, groups, fastest)
        w_arg = Arg("w", *tiles) if tiles else Arg("w", *view_5d(w))
        order = (TILE_PIXELS, tn, TILE_REDUCTION, fastest, *mma_flags(graph, node, x, w), split, tiles is not None)
        x_arg, y_arg = Arg("x", (flat_span(x),), (1,)), Arg("y", *view_5d(y))
        if split == 1:
            return [Launch(kernel_source(), grid, (x_arg, w_arg, y_arg), (*constants, *order))], 0
        shape = (groups * split, pixels, k_per_group)
        partials = Arg(WORKSPACE, shape, (pixels * k_per_group, k_per_group, 1))
        first = Launch(kernel_source(), (*grid[:2], grid[2] * split), (x_arg, w_arg, partials), (*constants, *order))
        second = Launch(kernel_source("conv_gemm_sum"), grid, (partials, y_arg),
                        (*y_dims[2:], k_total, k_per_group, TILE_PIXELS, tn, split))  # fmt: skip
        return [first, second], 4 * groups * split * pixels * k_per_group


class CutileConvDgradGemmBuilder(CutileLaunchesBuilder):
    """conv_dgrad as an implicit GEMM over dx's pixels: what the CuTe dgrad declines (float32, NCHW, 1-D, 3-D,
    groups). A dx pixel meets dy through tap t at (position + pre_padding - t * dilation) / stride, where that
    divides exactly; other taps read 0."""

    name = "cutile.conv_dgrad_gemm"
    engine_id = IN_TREE[name]
    ops = ("conv_dgrad",)
    priority = -1  # below the CuTe dgrad where it applies

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        dy, w, dx = graph.tensors[op.dy], graph.tensors[op.w], graph.tensors[op.dx]
        require_int32_spans(dy, w, dx)
        groups = dx.dims[1] // w.dims[1]
        x_dims = as_5d(dx)[0]
        pixels = x_dims[0] * x_dims[2] * x_dims[3] * x_dims[4]
        c_total, c_per_group = dx.dims[1], w.dims[1]
        k_per_group = w.dims[0] // groups
        w_dims = as_5d(w)[0]
        reduction = k_per_group * w_dims[2] * w_dims[3] * w_dims[4]
        tn = tile_channels(c_per_group)
        grid = grid_of(cdiv(pixels, TILE_PIXELS), c_per_group, tn, groups, "input channels")
        y_dims, y_strides = view_5d(dy)
        pre = padded_to_3(op.pre_padding, 0)
        constants = (
            pixels, *x_dims[2:],
            *y_dims[2:],
            c_total, c_per_group, k_per_group, reduction,
            *y_strides,
            *w_dims[2:],
            *padded_to_3(op.stride, 1),
            *pre,
            *padded_to_3(op.dilation, 1),
        )  # fmt: skip
        reach = max(d + q for d, q in zip(x_dims[2:], pre))  # a position plus its padding, before a tap
        require_int32_scalars(constants, reduction + TILE_REDUCTION, pixels + TILE_PIXELS, reach)
        order = (TILE_PIXELS, tn, TILE_REDUCTION, channels_innermost(dy), *mma_flags(graph, node, dy, w))
        args = (Arg("dy", (flat_span(dy),), (1,)), Arg("w", *view_5d(w)), Arg("dx", *view_5d(dx)))
        return [Launch(kernel_source("conv_dgrad_gemm"), grid, args, (*constants, *order))], 0


class CutileConvWgradGemmBuilder(CutileLaunchesBuilder):
    """conv_wgrad as a GEMM per group: dw [K/G, C/G x taps] = dy [K/G, pixels] x (x's windows) [pixels, C/G x
    taps], both operands gathered in the kernel; what the CuTe wgrads decline (float32, NCHW, 1-D, 3-D, groups).
    One block owns one output tile and walks every dy pixel (no split-K): correct for any size, fast only
    where the filter has many tiles."""

    name = "cutile.conv_wgrad_gemm"
    engine_id = IN_TREE[name]
    ops = ("conv_wgrad",)
    priority = -1  # below the CuTe wgrads where they apply

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        x, dy, dw = graph.tensors[op.x], graph.tensors[op.dy], graph.tensors[op.dw]
        require_int32_spans(x, dy, dw)
        if offset_bound(x, op) > LARGEST:
            raise ValueError(f"tensor '{x.name}' with its padding spans 2^31 elements or more (int32 offsets)")
        groups = x.dims[1] // dw.dims[1]
        y_dims, y_strides = view_5d(dy)
        pixels = y_dims[0] * y_dims[2] * y_dims[3] * y_dims[4]
        k_total, c_per_group = dy.dims[1], dw.dims[1]
        k_per_group = k_total // groups
        w_dims = as_5d(dw)[0]
        columns = c_per_group * w_dims[2] * w_dims[3] * w_dims[4]
        tm, tn = tile_channels(k_per_group), MAX_TILE_CHANNELS
        grid = grid_of(cdiv(k_per_group, tm), columns, tn, groups, "filter columns")
        x_dims, x_strides = view_5d(x)
        constants = (
            pixels, *y_dims[2:],
            *x_dims[2:],
            k_total, k_per_group, c_per_group,
            *x_strides,
            *y_strides,
            *w_dims[2:],
            *padded_to_3(op.stride, 1),
            *padded_to_3(op.pre_padding, 0),
            *padded_to_3(op.dilation, 1),
        )  # fmt: skip
        require_int32_scalars(constants, pixels + TILE_REDUCTION)  # columns are bounded by the grid's check above
        order = (tm, tn, TILE_REDUCTION, *mma_flags(graph, node, dy, x))
        args = (Arg("x", (flat_span(x),), (1,)), Arg("dy", (flat_span(dy),), (1,)), Arg("dw", *view_5d(dw)))
        return [Launch(kernel_source("conv_wgrad_gemm"), grid, args, (*constants, *order))], 0
