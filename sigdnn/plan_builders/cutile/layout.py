"""How a pointwise kernel walks its tensors: one flat index over the outputs' memory.

Every output of a kernel (a node's, or each exit of a fused region) has the
same dims and the same packed strides, in any dim order (row-major,
channels-last, ...): the kernel walks them as one flat index ``i`` in memory
order and stores tile ``i // tile`` of each as a contiguous block. Each input
is described over that walk after merging the dims that every operand steps
through as one:

- ``flat``: laid out exactly like the outputs (read as a contiguous block,
  even when another input keeps the dims from merging);
- ``scalar``: one element broadcast everywhere (read once);
- ``gather``: anything else (broadcast dims, other dim orders, padding):
  element offsets computed from ``i`` over the merged dims.

Pure Python: decided at build time, tested on the CPU.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import attrs

from sigdnn.plan_builders.tensor_views import INT32_MAX, packed_order


@attrs.frozen
class Access:
    kind: str  # "flat", "scalar" or "gather"
    strides: tuple[int, ...] = ()  # element strides over IterSpace.dims (gather)
    span: int = 1  # elements the input's 1-D view must cover


@attrs.frozen
class IterSpace:
    size: int  # elements of each output
    dims: tuple[int, ...]  # merged dims, outermost first (what gather offsets are computed over)
    inputs: tuple[Access, ...]

    @property
    def gathers(self) -> bool:
        return any(a.kind == "gather" for a in self.inputs)


def plan_iteration(
    out_dims: Sequence[int],
    out_strides: Sequence[int],
    inputs: Sequence[tuple[Sequence[int], Sequence[int]]],
) -> IterSpace:
    """The walk for outputs of ``out_dims``/``out_strides`` and inputs given as (dims, strides).

    ValueError says why a kernel cannot take these tensors.
    """
    out_dims = tuple(int(d) for d in out_dims)
    rank = len(out_dims)
    size = math.prod(out_dims)
    if size > INT32_MAX:
        raise ValueError(f"{size} elements exceed the kernels' 32-bit index")
    order = packed_order(out_dims, out_strides)
    if order is None:
        raise ValueError(f"output strides {tuple(out_strides)} are not packed")
    rows: list[list[int]] = []
    for dims, strides in inputs:
        if len(dims) > rank:
            raise ValueError(f"input rank {len(dims)} exceeds output rank {rank}")
        pad = rank - len(dims)
        dims = (1,) * pad + tuple(dims)
        strides = (0,) * pad + tuple(strides)
        if any(s < 0 for s in strides):
            raise ValueError("negative input strides")
        row = []
        for d, s, o in zip(dims, strides, out_dims, strict=True):
            if d not in (o, 1):
                raise ValueError(f"input dims {dims} do not broadcast to {out_dims}")
            row.append(0 if d == 1 else int(s))
        rows.append(row)
    if size == 0:
        return IterSpace(0, (), tuple(Access("scalar") for _ in rows))

    # Walk the output in memory order; merge a dim into the next inner one when
    # every input steps through both as one (the output always does: packed).
    dims = [out_dims[i] for i in order]
    strides = [[row[i] for i in order] for row in rows]
    k = len(dims) - 2
    while k >= 0:
        if all(row[k] == row[k + 1] * dims[k + 1] for row in strides):
            dims[k + 1] *= dims[k]
            del dims[k]
            for row in strides:
                del row[k]
        k -= 1

    packed = [math.prod(dims[k + 1 :]) for k in range(len(dims))]
    accesses = []
    for row in strides:
        if not any(row):
            accesses.append(Access("scalar"))
        elif row == packed:
            accesses.append(Access("flat", span=size))
        else:
            span = sum((d - 1) * s for d, s in zip(dims, row, strict=True)) + 1
            if span > INT32_MAX:
                raise ValueError("an input spans more than the kernels' 32-bit index")
            accesses.append(Access("gather", tuple(row), span))
    return IterSpace(size, tuple(dims), tuple(accesses))


def axis_walk(out_dims: Sequence[int], out_strides: Sequence[int], axis: int) -> tuple[int, int]:
    """(stride, extent) of ``axis`` in the outputs' memory: its index is (i // stride) % extent."""
    return int(out_strides[axis]) if out_dims[axis] > 1 else 1, int(out_dims[axis])
