"""GPU reference resample (nearest, (bi/tri)linear) and its backward, one spatial axis at a time.

Where samples fall and their weights are the op's definition (docs/ops.md:
torch.nn.functional.interpolate's conventions), kept in one place: the host
computes them with the CPU reference's per-axis sample tables
(``reference.math.resample``). The device work is separable as there: per
axis (shrinking axes first), y = x[i0] w0 + x[i1] w1 by gathers, and
backward each dy sent back to its inputs by a gather of, per input
position, the outputs that sampled it (a padded list), then a row sum.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.gpu_reference.arrays import Array, row_major_index
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.plan_builders.reference.math.resample import _samples as samples
from sigdnn.plan_builders.reference.math.resample import _shrinking_first as shrinking_first
from sigdnn.registry.engine_ids import IN_TREE


def along(a: Array, axis: int, values: np.ndarray) -> Array:
    """A per-position vector of one axis as a device array shaped to broadcast along it."""
    shape = [1] * len(a.shape)
    shape[axis] = values.size
    return Array.from_host(a.gpu, values.reshape(shape))


def take_along(a: Array, axis: int, index: np.ndarray) -> Array:
    """a gathered along ``axis`` at ``index`` (a 1-D or (positions, list) map; -1 reads 0)."""
    base = np.moveaxis(row_major_index(a.shape), axis, -1)  # (..., size)
    picked = np.where(index >= 0, base[..., np.maximum(index, 0)], -1)  # (..., *index.shape)
    return a.take(np.moveaxis(picked, range(base.ndim - 1, picked.ndim), range(axis, axis + index.ndim)))


def resample(x: Array, mode: str, out_dims: tuple[int, ...], scales: tuple[float, ...] | None, coords: str) -> Array:
    y = x
    for i in shrinking_first(x.shape[2:], out_dims[2:]):
        axis = 2 + i
        table = samples(x.shape[axis], out_dims[axis], mode, scales[i] if scales else None, coords)
        parts = [take_along(y, axis, index) for index, _ in table]
        if mode == "nearest":
            y = parts[0]
        else:
            (_, w0), (_, w1) = table
            y = parts[0] * along(parts[0], axis, w0) + parts[1] * along(parts[1], axis, w1)
    return y


def sources(index: np.ndarray, size: int) -> np.ndarray:
    """(size, most): for each input position the output positions whose sample reads it, ascending, -1 padded."""
    counts = np.bincount(index, minlength=size)
    table = np.full((size, max(int(counts.max(initial=0)), 1)), -1, np.int64)
    order = np.argsort(index, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot = np.arange(index.size) - starts[index[order]]
    table[index[order], slot] = order
    return table


def resample_backward(
    dy: Array, mode: str, x_dims: tuple[int, ...], scales: tuple[float, ...] | None, coords: str
) -> Array:
    g = dy
    for i in shrinking_first(dy.shape[2:], x_dims[2:]):
        axis = 2 + i
        total = None
        for index, weight in samples(x_dims[axis], dy.shape[axis], mode, scales[i] if scales else None, coords):
            part = g if weight is None else g * along(g, axis, weight)
            gathered = take_along(part, axis, sources(index, x_dims[axis]))  # (..., size, most, ...)
            moved = gathered.transpose(*(a for a in range(len(gathered.shape)) if a != axis + 1), axis + 1)
            part = moved.reduce_last("SUM")
            total = part if total is None else total + part
        g = total
    return g


class GpuReferenceResample(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.resample"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("resample",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        op = node.op
        dims = graph.tensors[op.y].dims
        return lambda i: {"y": resample(i["x"], op.mode, dims, op.scales, op.coordinates)}


class GpuReferenceResampleBackward(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.resample_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("resample_backward",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        op = node.op
        dims = graph.tensors[op.dx].dims
        return lambda i: {"dx": resample_backward(i["dy"], op.mode, dims, op.scales, op.coordinates)}
