"""cuTile pooling and pooling_backward: every mode, 1 to 3 spatial dims, any layout (``_window_kernels``).

The flat kernels take each tensor as a 5-D strided view over (N, C, D, H,
W), so NCHW, NHWC and strided views run the same kernel; the flat index a
block walks follows the written tensor's memory order, so neighbouring lanes
write neighbouring elements. The backward gathers from the outputs whose
windows cover each dx element (deterministic, no atomics); max pooling's
backward first records each window's argmax (an int32 per output, in the
workspace, laid out as dy is; as packed rows for the row kernels). A dx
element visits only the windows that can cover it: per axis the last one
starting at or before it and the min(ceil(k / s), outputs) - 1 before that
(4 of a 3x3 stride-2 window's 9 taps, 1 of a global average's 49).

Where every tensor's channels are innermost and its other axes collapse into
one row stride (NHWC, NDHWC, NWC, with or without a gap after each pixel's
channels), the kernels take them as 2-D (pixels, channels) views instead
(``*_rows``): a block reads each tap's source pixels a row of channels at a
time and stores its [pixels, channels] tile whole. Their backward runs one
launch per stride phase along w (``pool_backward_phases``, where ow has at
least ceil(kw / sw) windows): a block's dx pixels w = phase + sw * t then
take their windows from a run of dy's (one tap of each window for the whole
block), so dy and the argmax come as whole tiles of a slice, 16-byte
vectors where the strides allow, not a gather per element.
"""

from __future__ import annotations

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import stride_order
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.source import KernelSource, literal
from sigdnn.plan_builders.cutile.steps import Arg, Launch, Workspace
from sigdnn.plan_builders.cutile.tiling import cdiv
from sigdnn.registry.engine_ids import IN_TREE

TILE = 256  # outputs (or dx elements) one block computes
PER_BLOCK = 512  # elements of a [pixels, channels] tile: [8, 64] (H100, ResNet-50's maxpool: 256 0.44 ms, 512 0.21, 1024 0.28, 2048 0.38)
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
    """Window, stride and pre-padding over (D, H, W): size-1 windows of stride 1 where x has no such dim;
    ValueError (a decline) where one is past the kernels' int32 scalars (the buffer fuzzer's stride of 2^62
    reached them as a bare OverflowError)."""
    window = (*(1,) * (3 - spatial), *op.window)  # type: ignore[attr-defined]
    stride = (*(1,) * (3 - spatial), *op.stride)  # type: ignore[attr-defined]
    pre = (*(0,) * (3 - spatial), *op.pre_padding)  # type: ignore[attr-defined]
    if (largest := max(*window, *stride, *pre)) > LARGEST:
        raise ValueError(f"a window, stride or padding of {largest} is past the kernels' int32 scalars")
    return (*window, *stride, *pre)


def view(port: str, t: Tensor) -> Arg:
    dims, strides = as_5d(t)
    return Arg(port, dims, strides)


def rows(port: str, t: Tensor) -> Arg | None:
    """t as a 2-D (pixels, channels) view: where its channels are contiguous (more than one of them) and its
    (N, D, H, W) axes collapse into one row stride of at least C, row ((n * D + d) * H + h) * W + w; else None."""
    dims, strides = as_5d(t)
    if dims[1] < 2 or strides[1] != 1:
        return None
    pixel_axes = [axis for axis in (4, 3, 2, 0) if dims[axis] > 1]  # innermost first; a size-1 axis has no stride
    step = strides[pixel_axes[0]] if pixel_axes else dims[1]
    expected = step
    for axis in pixel_axes:
        if strides[axis] != expected:
            return None
        expected *= dims[axis]
    return Arg(port, (pixels_of(dims), dims[1]), (step, 1)) if step >= dims[1] else None


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
        x_rows, y_rows = rows("x", x), rows("y", y)
        if x_rows and y_rows:
            return [rows_forward(x_rows, y_rows, dims, as_5d(x)[0], window, MODES[op.mode])], 0
        constants = (y.size, *divisors(y), *dims, *as_5d(x)[0][2:], *window, MODES[op.mode], TILE)
        source = kernel_source("pool_forward")
        return [Launch(source, (cdiv(y.size, TILE), 1, 1), (view("x", x), view("y", y)), constants)], 0


def rows_forward(x: Arg, y: Arg, y_dims: tuple[int, ...], x_dims: tuple[int, ...], window: tuple[int, ...],
                 mode: int) -> Launch:  # fmt: skip
    """The row kernel's forward (or, in the ARGMAX mode, the argmax) over 2-D (pixels, channels) views."""
    pixels, columns = channel_tiles(y_dims[1])
    constants = (pixels_of(y_dims), *y_dims[2:], *x_dims[2:], *window, mode, pixels, columns)
    grid = (cdiv(pixels_of(y_dims), pixels), cdiv(y_dims[1], columns), 1)
    return Launch(kernel_source("pool_forward_rows"), grid, (x, y), constants)


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
        dy_rows, x_rows, dx_rows = rows("dy", dy), rows("x", x), rows("dx", dx)
        if dy_rows and dx_rows and (op.mode != "max" or x_rows):
            launches, argmax = [], dy_rows  # the average modes never read the argmax (their branch compiles without it)
            if op.mode == "max":  # one int32 per output, a row per output pixel as dy's
                argmax = work.take(dy_rows.shape, "int32")
                launches.append(rows_forward(x_rows, argmax, y_dims, x_dims, window, ARGMAX))
            pixels, columns = channel_tiles(x_dims[1])
            # every dx pixel's windows along w are a run, and a phase holds more than one pixel a row: phases (a
            # global pool's stride is its row: a launch per pixel of the row, each block's tile one pixel wide)
            if cdiv(window[2], window[5]) <= y_dims[4] and x_dims[4] // window[5] >= 2:
                dy_runs, argmax_runs = window_runs(dy_rows, y_dims), window_runs(argmax, y_dims)
                for phase in range(min(window[5], x_dims[4])):
                    launches.append(phase_launch(dy_runs, argmax_runs, dx_rows, phase, x_dims, y_dims, window,
                                                 candidates, MODES[op.mode]))  # fmt: skip
                return launches, work.nbytes
            constants = (pixels_of(x_dims), *x_dims[2:], *y_dims[2:], *window, *candidates, MODES[op.mode], pixels,
                         columns)  # fmt: skip
            grid = (cdiv(pixels_of(x_dims), pixels), cdiv(x_dims[1], columns), 1)
            launches.append(Launch(kernel_source("pool_backward_rows"), grid, (dy_rows, argmax, dx_rows), constants))
            return launches, work.nbytes
        launches, argmax = [], view("dy", dy)
        if op.mode == "max":  # laid out as dy is: the lanes that gather dy's neighbours gather theirs too
            argmax = work.take(y_dims, "int32", like=as_5d(dy)[1])
            constants = (dy.size, *divisors(dy), *y_dims, *x_dims[2:], *window, ARGMAX, TILE)
            launches.append(Launch(kernel_source("pool_forward"), (cdiv(dy.size, TILE), 1, 1), (view("x", x), argmax),
                                   constants))  # fmt: skip
        constants = (dx.size, *divisors(dx), *x_dims, *y_dims[2:], *window, *candidates, MODES[op.mode], TILE)
        grid = (cdiv(dx.size, TILE), 1, 1)
        args = (view("dy", dy), argmax, view("dx", dx))
        launches.append(Launch(kernel_source("pool_backward"), grid, args, constants))
        return launches, work.nbytes


def window_runs(rows_arg: Arg, y_dims: tuple[int, ...]) -> Arg:
    """A (pixels, channels) view of dy-shaped rows as (N * D * H, W, channels): rows of windows along w."""
    step, w = rows_arg.strides[0], y_dims[4]
    return attrs.evolve(rows_arg, shape=(rows_arg.shape[0] // w, w, y_dims[1]), strides=(w * step, step, 1))


def phase_launch(dy: Arg, argmax: Arg, dx_rows: Arg, phase: int, x_dims: tuple[int, ...], y_dims: tuple[int, ...],
                 window: tuple[int, ...], candidates: tuple[int, ...], mode: int) -> Launch:  # fmt: skip
    """The phase kernel over dx's pixels w = phase + sw * t: dx as (N * D * H, t, channels) from the pixel ``phase``."""
    step, xw, sw = dx_rows.strides[0], x_dims[4], window[5]
    count = cdiv(xw - phase, sw)
    dx = attrs.evolve(dx_rows, shape=(dx_rows.shape[0] // xw, count, x_dims[1]), strides=(xw * step, sw * step, 1),
                      offset=dx_rows.offset + phase * step)  # fmt: skip
    pixels, columns = channel_tiles(x_dims[1])
    constants = (phase, *x_dims[2:], *y_dims[2:], *window, *candidates, mode, pixels, columns)
    grid = (dx.shape[0], cdiv(count, pixels), cdiv(x_dims[1], columns))
    return Launch(kernel_source("pool_backward_phases"), grid, (dy, argmax, dx), constants)
