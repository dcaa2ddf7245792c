"""RESHAPE, TRANSPOSE, SLICE and CONCATENATE nodes -> the sigdnn ops of the same names."""

from __future__ import annotations

from sigdnn.graph.tensor import Tensor
from sigdnn.importers.cudnn_json.json_values import R
from sigdnn.importers.cudnn_json.mapping import NodeMapping, maps


def _packed(t: Tensor) -> bool:
    expect = 1
    for d, s in zip(reversed(t.dims), reversed(t.strides)):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


@maps("RESHAPE")
def _reshape(m: NodeMapping) -> None:
    x, y = m.input("X"), m.output("Y")
    mode = m.attr("reshape_mode", "VIEW_ONLY")
    m.attr("dim")
    m.attr("stride")
    tx, ty = m.tensor(x), m.tensor(y)  # type: ignore[arg-type]
    if mode not in ("VIEW_ONLY", "LOGICAL"):
        raise m.refuse(f"unknown reshape_mode {mode!r}")
    if mode == "VIEW_ONLY" and not (_packed(tx) and _packed(ty)):
        raise m.refuse("a VIEW_ONLY reshape of non-row-major strides reinterprets memory; sigdnn reshapes logically")
    m.add("reshape", x=x, y=y, dims=ty.dims)


@maps("TRANSPOSE")
def _transpose(m: NodeMapping) -> None:
    m.add("transpose", x=m.input("X"), y=m.output("Y"), permutation=m.ints("permutation"))


@maps("SLICE")
def _slice(m: NodeMapping) -> None:
    x = m.input("X")
    dims = m.tensor(x).dims  # type: ignore[arg-type]
    pairs = R.array(m.attr("slices", []), f"{m.where} slices")
    if len(pairs) > len(dims):
        raise m.refuse(f"{len(pairs)} slices for rank {len(dims)}")
    bounds = [R.ints(p, f"{m.where} slices", 2) for p in pairs]
    if any(len(b) != 2 for b in bounds):
        raise m.refuse("each slice is a [start, end] pair")
    steps = m.ints("slice_strides") or (1,)
    if len(steps) == 1:
        steps = steps * len(dims)
    if len(steps) != len(dims):
        raise m.refuse(f"slice_strides {list(steps)} for rank {len(dims)}")
    start = tuple(b[0] for b in bounds) + (0,) * (len(dims) - len(bounds))
    limit = tuple(b[1] for b in bounds) + dims[len(bounds) :]
    m.add("slice", x=x, y=m.output("Y"), start_indices=start, limit_indices=limit, strides=steps)


@maps("CONCATENATE")
def _concatenate(m: NodeMapping) -> None:
    if m.attr("in_place_index") is not None:
        raise m.refuse("in_place_index is not supported")
    count = len(m.inputs)
    xs = tuple(m.input(str(i)) for i in range(count))
    axis = R.int_(m.attr("axis"), f"{m.where} axis")
    m.add("concatenate", x=xs, y=m.output("Y"), axis=axis)
