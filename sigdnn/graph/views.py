"""Which data-movement nodes can be views: the strides and element offset of an output that aliases its input.

A reshape, transpose or slice moves no data when its output's declared
strides address exactly the input's elements where they already are: the
output is then the input's memory seen through other strides, starting some
elements in. These functions give those strides (None where no strides
can) from the input's declared dims and strides; the executor aliases a
node's output when its declared strides agree (``sigdnn.executor.views``),
and a graph author who wants a view declares them (``view_layout``).
Strides of size-1 dims address nothing, so they never decide anything here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sigdnn.graph.layout import is_non_overlapping
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph

View = tuple[tuple[int, ...], int]  # (output strides, element offset into the input)


def transposed(x: Tensor, permutation: Sequence[int]) -> View:
    """Output axis i walks input axis permutation[i]: its stride, from the same first element."""
    return tuple(x.strides[a] for a in permutation), 0


def sliced(x: Tensor, start: Sequence[int], step: Sequence[int]) -> View:
    """Every step-th element from start: the input's strides times the steps, starting at start."""
    strides = tuple(s * k for s, k in zip(x.strides, step))
    return strides, sum(a * s for a, s in zip(start, x.strides))


def reshaped(x: Tensor, dims: Sequence[int]) -> View | None:
    """Strides that read x's elements in logical row-major order under ``dims``, or None when none do.

    Both shapes are cut into the shortest runs of axes with equal element
    counts; a run of x's axes can be renamed only when it is contiguous in
    row-major order (each axis's stride is the next one's times its size),
    and the new run then steps through it from its innermost stride.
    """
    old = [(d, s) for d, s in zip(x.dims, x.strides) if d != 1]
    strides = [1] * len(dims)
    o = n = 0
    while o < len(old):
        o_end, n_end = o + 1, n
        while dims[n_end] == 1:  # size-1 axes before the run's first real one
            n_end += 1
        have, want = old[o][0], dims[n_end]
        n_end += 1
        while have != want:
            if have < want:
                have *= old[o_end][0]
                o_end += 1
            else:
                want *= dims[n_end]
                n_end += 1
        if any(old[k][1] != old[k + 1][0] * old[k + 1][1] for k in range(o, o_end - 1)):
            return None
        inner = old[o_end - 1][1]
        for k in range(n_end - 1, n - 1, -1):
            strides[k] = inner
            inner *= dims[k]
        o, n = o_end, n_end
    return tuple(strides), 0


def view_of(node: Node, x: Tensor) -> View | None:
    """The view a reshape, transpose or slice node's output would be of its input ``x`` (None: not a view op,
    or no strides can)."""
    op = node.op
    if op.kind == "transpose":
        return transposed(x, op.permutation)
    if op.kind == "slice":
        return sliced(x, op.start_indices, op.strides)
    if op.kind == "reshape":
        return reshaped(x, op.dims)
    return None


def same_addresses(dims: Sequence[int], a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether strides ``a`` and ``b`` address the same elements for ``dims`` (size-1 axes ignored)."""
    return len(a) == len(b) == len(dims) and all(d == 1 or p == q for d, p, q in zip(dims, a, b))


def view_layout(graph: Graph, y: Tensor) -> Tensor:
    """Declare on the output ``y`` of a reshape, transpose or slice the strides that make it a view of its input.

    Returns ``y``; leaves it as it was where no strides can (a reshape of a
    non-contiguous input) or where the graph's checks would take the view's
    strides for overlapping ones (they judge by stride order: a slice of every
    other column of 3-column rows gives strides (3, 2), which they refuse). The executor then runs no step for the node while
    ``y`` and its input stay virtual (``sigdnn.executor.views``).
    """
    for node in graph.nodes:
        if node.op.kind in ("reshape", "transpose", "slice") and node.op.outputs()["y"] == y.uid:
            view = view_of(node, graph.tensors[node.op.inputs()["x"]])
            if view is not None and is_non_overlapping(y.dims, view[0]):
                y.set_stride(view[0])
    return y
