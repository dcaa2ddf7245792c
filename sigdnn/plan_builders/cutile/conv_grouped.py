"""cuTile grouped and depthwise conv fprop: a direct convolution (``_conv_kernels.py``), 1 to 3 spatial dims.

The CuTe conv builders run ungrouped convs as implicit GEMMs and decline
groups; this builder takes exactly those: G >= 2 groups dividing C and K
(depthwise: G = C, K = G x multiplier), any padding (asymmetric too),
stride and dilation, any layout or strides (x as a flat view of its span,
w and y as 5-D views over (N or K, C, D, H, W)), f32 / f16 / bf16 io with
float32 sums. A block computes a tile of output pixels by output channels;
the channel tile is wide where y's channels are innermost (NHWC: lanes along
channels read neighbouring x elements) and narrow otherwise (NCHW: lanes
along pixels do). Each output element sums its group's C/G x taps products,
so a depthwise conv reads each x element once per tap from cache and about
once from memory; a grouped conv with large C/G is a plain per-output loop
(no tensor cores).
"""

from __future__ import annotations

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.pooling import as_5d
from sigdnn.plan_builders.cutile.source import KernelSource, literal
from sigdnn.plan_builders.cutile.steps import Arg, Launch
from sigdnn.plan_builders.cutile.tiling import cdiv, pow2
from sigdnn.registry.engine_ids import IN_TREE

TILE = 512  # y elements one block computes (pixels x channels)
WIDE_CHANNELS = 64  # the channel tile where y's channels are innermost
NARROW_CHANNELS = 4  # and where they are not
LARGEST = 2**31 - 1  # int32 offsets and indices
GRID_Y = 65535  # CUDA's limit on a grid's second dim (channel tiles)


def kernel_source() -> KernelSource:
    """The literal kernel's text with ``kernel`` bound to it."""
    return literal("_conv_kernels.py", "conv_grouped", "conv_grouped")


def padded_to_3(values: tuple[int, ...], fill: int) -> tuple[int, ...]:
    """A per-spatial-dim attribute over (D, H, W): ``fill`` where the conv has no such dim."""
    return (*(fill,) * (3 - len(values)), *values)


def channels_innermost(t: Tensor) -> bool:
    """Whether the channel axis has the smallest stride among t's axes longer than 1."""
    longer = [(s, a) for a, (d, s) in enumerate(zip(t.dims, t.strides)) if d > 1 or a == 1]
    return min(longer)[1] == 1


def tile(y: Tensor) -> tuple[int, int]:
    """(pixels, channels) of a block's tile: powers of two of ``TILE`` elements, channels as y's layout favours."""
    channels = min(pow2(y.dims[1]), WIDE_CHANNELS if channels_innermost(y) else NARROW_CHANNELS)
    return TILE // channels, channels


def groups_of(node: Node, graph: Graph) -> int:
    op = node.op
    x, w = graph.tensors[op.x], graph.tensors[op.w]
    return x.dims[1] // w.dims[1]


def view_5d(t: Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(dims, strides) of t over (N, C, D, H, W), a size-1 axis at stride 1: its only index is 0, so its own
    stride (which may be anything, even past int32) addresses nothing."""
    dims, strides = as_5d(t)
    return dims, tuple(s if d > 1 else 1 for d, s in zip(dims, strides))


def offset_bound(x: Tensor, op: ConvFprop) -> int:
    """A bound on every |element offset| (and partial sum of one) the kernel forms into x: a window position
    runs from -pre to d - 1 + post, a tap's own offset at most over the padded extent."""
    dims, strides = view_5d(x)
    pre, post = padded_to_3(op.pre_padding, 0), padded_to_3(op.post_padding, 0)
    extents = [p + d - 1 + q for d, p, q in zip(dims[2:], pre, post)]
    return sum(r * s for r, s in zip((dims[0] - 1, dims[1] - 1, *extents), strides))


def fits(x: Tensor, w: Tensor, y: Tensor, op: ConvFprop, pixels: int, tile_pixels: int) -> None:
    """ValueError unless every index the kernel forms fits int32 and the strides are not negative."""
    for t in (x, w, y):
        if min(t.strides) < 0:
            raise ValueError(f"tensor '{t.name}' has negative strides {list(t.strides)}")
    for t in (w, y):
        if 1 + sum((d - 1) * s for d, s in zip(*view_5d(t))) > LARGEST:
            raise ValueError(f"tensor '{t.name}' spans 2^31 elements or more (int32 indices)")
    if offset_bound(x, op) > LARGEST:
        raise ValueError(f"tensor '{x.name}' with its padding spans 2^31 elements or more (int32 offsets)")
    if pixels + tile_pixels > LARGEST:
        raise ValueError(f"{pixels} output pixels: 2^31 or more with a tile's tail (int32 indices)")


class CutileConvGroupedBuilder(CutileLaunchesBuilder):
    name = "cutile.conv_fprop_grouped"
    engine_id = IN_TREE[name]
    ops = ("conv_fprop",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        x, w, y = graph.tensors[op.x], graph.tensors[op.w], graph.tensors[op.y]
        groups = groups_of(node, graph)
        if groups < 2:
            raise ValueError(f"1 group: {self.name} runs grouped and depthwise convs only "
                             "(the CuTe conv builders run ungrouped ones)")  # fmt: skip
        y_dims = as_5d(y)[0]
        tile_pixels, tile_channels = tile(y)
        pixels = y_dims[0] * y_dims[2] * y_dims[3] * y_dims[4]
        fits(x, w, y, op, pixels, tile_pixels)
        k = y.dims[1]
        grid = (cdiv(pixels, tile_pixels), cdiv(k, tile_channels), 1)
        if grid[1] > GRID_Y:
            raise ValueError(f"{k} output channels need {grid[1]} channel tiles; a grid holds {GRID_Y}")
        x_dims, x_strides = view_5d(x)
        constants = (
            pixels, *y_dims[2:],
            *x_dims[2:],
            k, k // groups, w.dims[1],
            *x_strides,
            *as_5d(w)[0][2:],
            *padded_to_3(op.stride, 1),
            *padded_to_3(op.pre_padding, 0),
            *padded_to_3(op.dilation, 1),
            tile_pixels, tile_channels,
        )  # fmt: skip
        if max(constants) > LARGEST:
            raise ValueError(f"a size, stride, padding or dilation of {max(constants)} is past the kernel's "
                             "int32 scalars")  # fmt: skip
        span = 1 + sum((d - 1) * s for d, s in zip(x_dims, x_strides))
        args = (Arg("x", (span,), (1,)), Arg("w", *view_5d(w)), Arg("y", *view_5d(y)))
        return [Launch(kernel_source(), grid, args, constants)], 0
