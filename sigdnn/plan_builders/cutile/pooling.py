"""cuTile pooling and pooling_backward: every mode, 1 to 3 spatial dims, any layout (``_window_kernels``).

Each tensor is handed to the kernel as a 5-D strided view over (N, C, D, H,
W), so NCHW, NHWC and strided views run the same kernel; the flat index a
block walks follows the written tensor's memory order, so neighbouring lanes
write neighbouring elements. The backward gathers from the outputs whose
windows cover each dx element (deterministic, no atomics); max pooling's
backward first records each window's argmax (an int32 per output, in the
workspace, laid out as dy is). A dx element visits only the windows that
can cover it: per axis the last one starting at or before it and the
min(ceil(k / s), outputs) - 1 before that (4 of a 3x3 stride-2 window's 9
taps, 1 of a global average's 49).

Where channels are innermost in every tensor (NHWC, NDHWC, NWC) the kernels
take [pixels, channels] tiles instead (``*_channels``): a pixel's
coordinates are divided out once per row, not per element, and a tap's
gather is one pixel offset plus one channel offset.
"""

from __future__ import annotations

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import span_elements, stride_order
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.source import KernelSource, literal
from sigdnn.plan_builders.cutile.steps import Arg, Launch, Workspace
from sigdnn.plan_builders.cutile.tiling import cdiv
from sigdnn.registry.engine_ids import IN_TREE

TILE = 256  # outputs (or dx elements) one block computes
PER_BLOCK = 512  # elements of a [pixels, channels] tile: [8, 64] (H200, ResNet-50's maxpool: 256 0.49 ms, 512 0.21, 1024 0.29, 2048 0.53)
MODES = {"max": 0, "average_count_include_pad": 1, "average_count_exclude_pad": 2}
ARGMAX = 3  # the forward kernels' mode that writes the argmax instead of the max
LARGEST = 2**31 - 1 - TILE  # int32 flat indices and coordinates


def kernel_source(name: str) -> KernelSource:
    """The window kernels' text with ``kernel`` bound to ``name``."""
    return literal("_window_kernels.py", name, f"window_{name}")


def as_5d(t: Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(dims, strides) of t over (N, C, D, H, W): missing spatial dims are size 1."""
    missing = 5 - t.rank
    return (*t.dims[:2], *(1,) * missing, *t.dims[2:]), (*t.strides[:2], *(1,) * missing, *t.strides[2:])


def divisors(t: Tensor) -> tuple[int, ...]:
    """Per (N, C, D, H, W) axis, the elements of the axes inside it in t's memory order."""
    dims, strides = as_5d(t)
    inner, out = 1, [1] * 5
    for axis in reversed(stride_order(strides)):
        out[axis] = inner
        inner *= dims[axis]
    return tuple(out)


def geometry(op: object, spatial: int) -> tuple[int, ...]:
    """Window, stride and pre-padding over (D, H, W): size-1 windows of stride 1 where x has no such dim."""
    window = (*(1,) * (3 - spatial), *op.window)  # type: ignore[attr-defined]
    stride = (*(1,) * (3 - spatial), *op.stride)  # type: ignore[attr-defined]
    pre = (*(0,) * (3 - spatial), *op.pre_padding)  # type: ignore[attr-defined]
    return (*window, *stride, *pre)


def view(port: str, t: Tensor) -> Arg:
    dims, strides = as_5d(t)
    return Arg(port, dims, strides)


def flat(port: str, t: Tensor) -> Arg:
    """t's buffer as 1-D elements, for kernels that compute offsets from its strides."""
    return Arg(port, (span_elements(t.dims, t.strides),), (1,))


def channels_innermost(*tensors: Tensor) -> bool:
    """Whether every tensor's channel axis is its innermost, with more than one channel (NHWC and kin)."""
    return all(t.dims[1] > 1 and t.strides[1] == 1 for t in tensors)


def channel_tiles(channels: int) -> tuple[int, int]:
    """(PIXELS, CHANNELS) of a [pixels, channels] tile: up to 64 channels, PER_BLOCK elements."""
    columns = min(64, 1 << (channels - 1).bit_length())
    return PER_BLOCK // columns, columns


def pixels_of(dims: tuple[int, ...]) -> int:
    """Elements per channel of a 5-D (N, C, D, H, W) tensor."""
    return dims[0] * dims[2] * dims[3] * dims[4]


def fits(*tensors: Tensor) -> None:
    for t in tensors:
        if t.size > LARGEST or 1 + sum((d - 1) * s for d, s in zip(t.dims, t.strides)) > LARGEST:
            raise ValueError(f"tensor '{t.name}' spans 2^31 elements or more (int32 indices)")
        if min(t.strides) < 0:
            raise ValueError(f"tensor '{t.name}' has negative strides {list(t.strides)}")


class CutilePoolingBuilder(CutileLaunchesBuilder):
    name = "cutile.pooling"
    engine_id = IN_TREE[name]
    ops = ("pooling",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        x, y = graph.tensors[op.x], graph.tensors[op.y]
        fits(x, y)
        dims = as_5d(y)[0]
        window = geometry(op, x.rank - 2)
        if channels_innermost(x, y):
            rows, columns = channel_tiles(dims[1])
            constants = (pixels_of(dims), *dims, *as_5d(x)[0][2:], *as_5d(x)[1], *window, MODES[op.mode], rows, columns)
            grid = (cdiv(pixels_of(dims), rows), cdiv(dims[1], columns), 1)
            return [Launch(kernel_source("pool_forward_channels"), grid, (flat("x", x), view("y", y)), constants)], 0
        constants = (y.size, *divisors(y), *dims, *as_5d(x)[0][2:], *window, MODES[op.mode], TILE)
        source = kernel_source("pool_forward")
        return [Launch(source, (cdiv(y.size, TILE), 1, 1), (view("x", x), view("y", y)), constants)], 0


class CutilePoolingBackwardBuilder(CutileLaunchesBuilder):
    name = "cutile.pooling_backward"
    engine_id = IN_TREE[name]
    ops = ("pooling_backward",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        dy, x, dx = graph.tensors[op.dy], graph.tensors[op.x], graph.tensors[op.dx]
        fits(dy, x, dx)
        y_dims, x_dims = as_5d(dy)[0], as_5d(x)[0]
        window = geometry(op, x.rank - 2)
        candidates = tuple(min(cdiv(k, s), o) for k, s, o in zip(window[:3], window[3:6], y_dims[2:]))
        work = Workspace()
        launches = []
        argmax = view("dy", dy)  # the average modes never read it (their branch compiles without it)
        by_channels = channels_innermost(dy, x, dx)
        rows, columns = channel_tiles(x_dims[1])
        if op.mode == "max":  # laid out as dy is: the lanes that gather dy's neighbours gather theirs too
            argmax = work.take(y_dims, "int32", like=as_5d(dy)[1])
            if by_channels:
                constants = (pixels_of(y_dims), *y_dims, *x_dims[2:], *as_5d(x)[1], *window, ARGMAX, rows, columns)
                grid = (cdiv(pixels_of(y_dims), rows), cdiv(x_dims[1], columns), 1)
                source = kernel_source("pool_forward_channels")
                launches.append(Launch(source, grid, (flat("x", x), argmax), constants))
            else:
                constants = (dy.size, *divisors(dy), *y_dims, *x_dims[2:], *window, ARGMAX, TILE)
                grid = (cdiv(dy.size, TILE), 1, 1)
                launches.append(Launch(kernel_source("pool_forward"), grid, (view("x", x), argmax), constants))
        if by_channels:
            gathered = attrs.evolve(argmax, shape=(max(span_elements(argmax.shape, argmax.strides), 1),), strides=(1,))
            constants = (pixels_of(x_dims), *x_dims, *y_dims[2:], *as_5d(dy)[1], *argmax.strides, *window,
                         *candidates, MODES[op.mode], rows, columns)  # fmt: skip
            grid = (cdiv(pixels_of(x_dims), rows), cdiv(x_dims[1], columns), 1)
            args = (flat("dy", dy), gathered, view("dx", dx))
            launches.append(Launch(kernel_source("pool_backward_channels"), grid, args, constants))
            return launches, work.nbytes
        constants = (dx.size, *divisors(dx), *x_dims, *y_dims[2:], *window, *candidates, MODES[op.mode], TILE)
        grid = (cdiv(dx.size, TILE), 1, 1)
        args = (view("dy", dy), argmax, view("dx", dx))
        launches.append(Launch(kernel_source("pool_backward"), grid, args, constants))
        return launches, work.nbytes
