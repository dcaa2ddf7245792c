"""Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Slice, Split, Concat, Pad -> sigdnn data movement.

A known input stays known (the op runs on the NumPy value at import time);
a reshape to the same dims is no node at all.
"""

from __future__ import annotations

import math

import numpy as np

from sigdnn.graph.tensor import Tensor
from sigdnn.importers.onnx_fold import MAX_FOLDED_ELEMENTS
from sigdnn.importers.onnx_node import OnnxNode, Value, onnx_op


def _rank_axis(node: OnnxNode, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise node.refuse(f"axis {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


@onnx_op("Reshape")
def reshape(node: OnnxNode) -> list[Value]:
    dims_in = node.dims(0)
    shape = list(node.ints(1, "shape"))
    allowzero = node.attr("allowzero", 0)
    if not allowzero:
        shape = [dims_in[i] if d == 0 else d for i, d in enumerate(shape)]
    if shape.count(-1) > 1 or any(d < -1 for d in shape):
        raise node.refuse(f"shape {shape} is not a valid target")
    total = math.prod(dims_in)
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or total % known:
            raise node.refuse(f"shape {shape} cannot hold {list(dims_in)}")
        shape[shape.index(-1)] = total // known
    if math.prod(shape) != total or 0 in shape:
        raise node.refuse(f"shape {shape} does not hold the {total} elements of {list(dims_in)}")
    return [node.reshape(node.value(0), shape or (1,))]


@onnx_op("Flatten")
def flatten(node: OnnxNode) -> list[Value]:
    dims = node.dims(0)
    axis = int(node.attr("axis", 1))
    if not -len(dims) <= axis <= len(dims):
        raise node.refuse(f"axis {axis} is out of range for rank {len(dims)}")
    axis = axis + len(dims) if axis < 0 else axis
    return [node.reshape(node.value(0), (math.prod(dims[:axis]), math.prod(dims[axis:])))]


@onnx_op("Squeeze", "Unsqueeze")
def squeeze(node: OnnxNode) -> list[Value]:
    dims = list(node.dims(0))
    axes = node.ints(1, "axes") if node.has(1) else tuple(node.attr("axes", None) or ())
    if node.op_type == "Squeeze":
        axes = {_rank_axis(node, a, len(dims)) for a in axes} or {i for i, d in enumerate(dims) if d == 1}
        if any(dims[a] != 1 for a in axes):
            raise node.refuse(f"axes {sorted(axes)} of {dims} are not all 1")
        out = [d for i, d in enumerate(dims) if i not in axes]
    else:
        rank = len(dims) + len(axes)
        axes = sorted(_rank_axis(node, a, rank) for a in axes)
        if len(set(axes)) != len(axes):
            raise node.refuse(f"axes {list(axes)} repeat")
        out = dims
        for a in axes:
            out.insert(a, 1)
    return [node.reshape(node.value(0), out or (1,))]


@onnx_op("Transpose")
def transpose(node: OnnxNode) -> list[Value]:
    rank = len(node.dims(0))
    perm = node.attr("perm", None) or tuple(reversed(range(rank)))
    return [node.transpose(node.value(0), perm)]


@onnx_op("Slice")
def slice_(node: OnnxNode) -> list[Value]:
    dims = node.dims(0)
    starts, ends = node.ints(1, "starts"), node.ints(2, "ends")
    axes = node.ints(3, "axes") if node.has(3) else tuple(range(len(starts)))
    steps = node.ints(4, "steps") if node.has(4) else (1,) * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise node.refuse("starts, ends, axes and steps differ in length")
    bounds = [slice(None)] * len(dims)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _rank_axis(node, a, len(dims))
        if st == 0:
            raise node.refuse("a step of 0")
        bounds[a] = slice(s, e, st)
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return [np.ascontiguousarray(v[tuple(bounds)])]
    if all(b == slice(None) for b in bounds):
        return [v]
    shape = tuple(len(range(*b.indices(d))) for b, d in zip(bounds, dims))
    if 0 in shape:  # nothing to read: known at import time (torch.roll by 0 exports one, for a Concat to drop)
        return [np.empty(shape, node.dtype(0).numpy)]
    return [node.graph.slice(v, bounds, name=node.fresh(""))]


@onnx_op("Split")
def split(node: OnnxNode) -> list[Value]:
    dims = node.dims(0)
    axis = _rank_axis(node, int(node.attr("axis", 0)), len(dims))
    count = len(node.proto.output)
    if node.has(1):
        sizes = node.ints(1, "split")
    else:
        parts = node.attr("num_outputs", count)
        if not isinstance(parts, int) or parts < 1:
            raise node.refuse(f"num_outputs {parts!r} is not a count >= 1")
        chunk = -(-dims[axis] // parts)
        sizes = tuple(min(chunk, dims[axis] - i * chunk) for i in range(parts))
    if sum(sizes) != dims[axis] or len(sizes) != count or min(sizes) < 1:
        raise node.refuse(f"split sizes {list(sizes)} do not cut dim {axis} ({dims[axis]}) into {count} outputs")
    outs: list[Value] = []
    start = 0
    v = node.value(0)
    for i, size in enumerate(sizes):
        bounds = [slice(None)] * len(dims)
        bounds[axis] = slice(start, start + size)
        start += size
        if isinstance(v, np.ndarray):
            outs.append(np.ascontiguousarray(v[tuple(bounds)]))
        else:
            outs.append(node.graph.slice(v, bounds, name=node.fresh(f"part{i}")))
    return outs


@onnx_op("Concat")
def concat(node: OnnxNode) -> list[Value]:
    values = [node.value(i) for i in range(len(node.proto.input)) if node.has(i)]
    rank = len(node.dims(0))
    axis = _rank_axis(node, int(node.attr("axis")), rank)
    # Empty pieces add nothing (inputs all known, empty ones too, were computed at import time, not here).
    values = [v for v in values if not (isinstance(v, np.ndarray) and v.size == 0)]
    if len(values) == 1:
        return [node.pointwise("identity", values[0])]
    tensors = [node.materialize(v, f"part{i}") for i, v in enumerate(values)]
    return [node.graph.concatenate(tensors, axis, name=node.fresh(""))]


@onnx_op("Gather")
def gather(node: OnnxNode) -> list[Value]:
    """Gather with known indices: slices along the axis (a scalar index also drops the axis)."""
    dims = node.dims(0)
    axis = _rank_axis(node, int(node.attr("axis", 0)), len(dims))
    indices = node.const(1, "indices")
    if indices.ndim > 1:
        raise node.refuse("indices of rank > 1 are not supported")
    picks = [int(i) + dims[axis] if i < 0 else int(i) for i in indices.reshape(-1)]
    if any(not 0 <= i < dims[axis] for i in picks) or not picks:
        raise node.refuse(f"indices {indices.tolist()} are out of range for dim {axis} ({dims[axis]})")
    v = node.value(0)
    if isinstance(v, np.ndarray):
        return [np.take(v, indices, axis=axis)]
    parts = []
    for i, p in enumerate(picks):
        bounds = [slice(None)] * len(dims)
        bounds[axis] = slice(p, p + 1)
        parts.append(node.graph.slice(v, bounds, name=node.fresh(f"pick{i}")))
    out = parts[0] if len(parts) == 1 else node.graph.concatenate(parts, axis, name=node.fresh("gather"))
    if indices.ndim == 0:
        return [node.reshape(out, dims[:axis] + dims[axis + 1 :] or (1,), "drop_axis")]
    return [out]


PAD_MODES = ("constant", "reflect", "edge", "wrap")
MAX_SLICED_PAD = 256  # reflect / edge pads are sliced an element at a time; models pad by a few (a kernel's reach)


def _pad_pieces(node: OnnxNode, v: Tensor, axis: int, pre: int, post: int, mode: str, fill: np.ndarray) -> Tensor:
    """v with ``pre`` / ``post`` elements added along ``axis`` (both >= 0): a concatenation of v and slices of it
    (reflect, edge, wrap) or constant tensors of ``fill``."""
    dims = list(v.dims)
    size = dims[axis]
    if mode == "reflect" and max(pre, post) > size - 1:
        raise node.refuse(f"reflect pads ({pre}, {post}) of axis {axis} need at most {size - 1} (its size - 1)")
    if mode == "wrap" and max(pre, post) > size:
        raise node.refuse(f"wrap pads ({pre}, {post}) of axis {axis} exceed its size {size}")
    if mode in ("reflect", "edge") and max(pre, post) > MAX_SLICED_PAD:
        raise node.refuse(f"{mode} pads ({pre}, {post}) of axis {axis}: at most {MAX_SLICED_PAD} are supported")

    def run(start: int, stop: int) -> Tensor:
        bounds = [slice(None)] * len(dims)
        bounds[axis] = slice(start, stop)
        return node.graph.slice(v, bounds, name=node.fresh(f"pad_axis{axis}"))

    def constant(count: int, side: str) -> Tensor:
        shape = [*dims[:axis], count, *dims[axis + 1 :]]
        elements = math.prod(shape)
        if elements > MAX_FOLDED_ELEMENTS:  # before a hostile pad allocates it (2^25 rows: 2 GiB, 27 s)
            raise node.refuse(f"a constant pad of {shape} would make {elements} elements at import time "
                              f"(limit {MAX_FOLDED_ELEMENTS})")  # fmt: skip
        node.importer.spend(elements * fill.itemsize, node)
        return node.materialize(np.full(shape, fill), f"pad_{side}_axis{axis}")

    before: list[Tensor] = {
        "constant": lambda: [constant(pre, "before")] if pre else [],
        "edge": lambda: [run(0, 1) for _ in range(pre)],
        "reflect": lambda: [run(i, i + 1) for i in range(pre, 0, -1)],
        "wrap": lambda: [run(size - pre, size)] if pre else [],
    }[mode]()
    after: list[Tensor] = {
        "constant": lambda: [constant(post, "after")] if post else [],
        "edge": lambda: [run(size - 1, size) for _ in range(post)],
        "reflect": lambda: [run(size - 1 - i, size - i) for i in range(1, post + 1)],
        "wrap": lambda: [run(0, post)] if post else [],
    }[mode]()
    if not before and not after:
        return v
    return node.graph.concatenate([*before, v, *after], axis, name=node.fresh(f"pad_axis{axis}"))


@onnx_op("Pad")
def pad(node: OnnxNode) -> list[Value]:
    """Negative pads crop (a slice); positive ones concatenate constants (constant mode) or slices of the input
    (reflect, edge, wrap: numpy.pad's modes), one axis at a time."""
    dims = node.dims(0)
    mode = str(node.attr("mode", "constant"))
    if mode not in PAD_MODES:
        raise node.refuse(f"mode {mode!r}; supported: {', '.join(PAD_MODES)}")
    pads = node.ints(1, "pads")
    axes = [_rank_axis(node, a, len(dims)) for a in (node.ints(3, "axes") if node.has(3) else range(len(dims)))]
    if len(pads) != 2 * len(axes) or len(set(axes)) != len(axes):
        raise node.refuse(f"pads {list(pads)} do not hold a begin and an end for each of the axes {axes}")
    dtype = node.dtype(0).numpy
    fill = np.array(node.const(2, "constant_value").reshape(-1)[0] if node.has(2) else 0, dtype=dtype)
    v = node.tensor(0)  # a known input too: its pad is nodes (folding would have taken it, had it been priced)
    crop = [slice(None)] * len(dims)
    for axis, pre, post in zip(axes, pads[: len(axes)], pads[len(axes) :]):
        if -min(pre, 0) - min(post, 0) >= dims[axis]:
            raise node.refuse(f"pads ({pre}, {post}) crop all of axis {axis}'s {dims[axis]} elements or more")
        if min(pre, post) < 0:
            crop[axis] = slice(-min(pre, 0), dims[axis] + min(post, 0))
    if any(b != slice(None) for b in crop):
        v = node.graph.slice(v, crop, name=node.fresh("crop"))
    for axis, pre, post in zip(axes, pads[: len(axes)], pads[len(axes) :]):
        v = _pad_pieces(node, v, axis, max(pre, 0), max(post, 0), mode, fill)
    return [v]
