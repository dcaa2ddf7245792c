"""cuTile resample forward: nearest and (bi/tri)linear, every coordinate convention, 1 to 3 spatial dims, any layout.

The literal kernel (``_window_kernels.py``'s ``resample_forward``) takes each
axis's source position as (scale * o + bias) / den in integers, so it finds
exactly the samples and weights the reference does (docs/ops.md: positions
computed in rational arithmetic when y's dims are given). Positions from
float ``scales`` are declined: float32 would move a nearest sample across an
integer boundary where the reference's float64 does not.

The backward gathers, per dx element and axis, from the run of outputs that
sample it: positions never decrease along an axis, so the run starts at the
first output whose position's floor reaches i - 1 (linear; i for nearest)
and is at most ``span`` long, the longest run any input has (counted here
from the same integer positions, once per shape).
"""

from __future__ import annotations

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.pooling import TILE, as_5d, divisors, fits, kernel_source, view
from sigdnn.plan_builders.cutile.steps import Launch
from sigdnn.plan_builders.cutile.tiling import cdiv
from sigdnn.registry.engine_ids import IN_TREE

MODES = {"nearest": 0, "bilinear": 1}
LARGEST = 2**31 - 1


def positions(mode: str, coordinates: str, size: int, out: int) -> tuple[int, int, int]:
    """(scale, bias, den) with source position (scale * o + bias) / den, before flooring at 0."""
    if mode == "nearest":  # floor((o + 0.5) I / O) or floor(o I / O)
        return (2 * size, size, 2 * out) if coordinates == "half_pixel" else (size, 0, out)
    if coordinates == "half_pixel":  # (o + 0.5) I / O - 0.5
        return 2 * size, size - out, 2 * out
    if coordinates == "align_corners":  # o (I - 1) / (O - 1)
        return size - 1, 0, max(out - 1, 1)
    return size, 0, out


class CutileResampleBuilder(CutileLaunchesBuilder):
    name = "cutile.resample"
    engine_id = IN_TREE[name]
    ops = ("resample",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        x, y = graph.tensors[op.x], graph.tensors[op.y]
        if op.scales:
            raise ValueError(f"scales {list(op.scales)}: positions from float scales are left to the reference")
        fits(x, y)
        x_dims, y_dims = as_5d(x)[0], as_5d(y)[0]
        axes = [positions(op.mode, op.coordinates, i, o) for i, o in zip(x_dims[2:], y_dims[2:])]
        if any(scale * (o - 1) + abs(bias) >= LARGEST for (scale, bias, _), o in zip(axes, y_dims[2:])):
            raise ValueError("source positions would overflow int32")
        constants = (y.size, *divisors(y), *y_dims, *x_dims[2:], *(v for a in axes for v in a), MODES[op.mode], TILE)
        source = kernel_source("resample_forward")
        return [Launch(source, (cdiv(y.size, TILE), 1, 1), (view("x", x), view("y", y)), constants)], 0


def samples(scale: int, bias: int, den: int, size: int, out: int) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) input of every output along one axis, as the kernels compute them; high is -1 where its
    weight t is 0 (output 0 of a half-pixel upsampling sits at position 0 and takes nothing from input 1)."""
    num = np.maximum(np.arange(out, dtype=np.int64) * scale + bias, 0)
    low = np.minimum(num // den, size - 1)
    return low, np.where(num % den > 0, np.minimum(low + 1, size - 1), -1)


def span(mode: str, scale: int, bias: int, den: int, size: int, out: int) -> tuple[int, int]:
    """(step, span): the divisor the kernel finds an input's first output with, and the longest run of outputs
    from that first one to the last that samples the input."""
    step, lead = max(scale, 1), 0 if mode == "nearest" else 1
    low, high = samples(scale, bias, den, size, out)
    longest = 1
    for i in range(size):
        reach = (i - lead) * den - bias
        first = -(-reach // step) if reach > 0 else 0
        takers = np.flatnonzero((low == i) | ((high == i) & bool(lead)))
        if takers.size:
            if takers[0] < first:
                raise ValueError(f"input {i} is sampled by output {takers[0]} before its run starts at {first}")
            longest = max(longest, int(takers[-1]) - first + 1)
    return step, longest


class CutileResampleBackwardBuilder(CutileLaunchesBuilder):
    name = "cutile.resample_backward"
    engine_id = IN_TREE[name]
    ops = ("resample_backward",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        dy, dx = graph.tensors[op.dy], graph.tensors[op.dx]
        if op.scales:
            raise ValueError(f"scales {list(op.scales)}: positions from float scales are left to the reference")
        fits(dy, dx)
        x_dims, y_dims = as_5d(dx)[0], as_5d(dy)[0]
        axes = []
        for i, o in zip(x_dims[2:], y_dims[2:]):
            scale, bias, den = positions(op.mode, op.coordinates, i, o)
            if scale * (o - 1) + abs(bias) >= LARGEST or (i + 1) * den >= LARGEST:
                raise ValueError("source positions would overflow int32")
            axes.append((scale, bias, den, *span(op.mode, scale, bias, den, i, o)))
        constants = (dx.size, *divisors(dx), *x_dims, *y_dims[2:], *(v for a in axes for v in a), MODES[op.mode], TILE)
        source = kernel_source("resample_backward")
        return [Launch(source, (cdiv(dx.size, TILE), 1, 1), (view("dy", dy), view("dx", dx)), constants)], 0
