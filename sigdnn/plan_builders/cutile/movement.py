"""cuTile copies for reshape, transpose, slice and concatenate where the executor cannot make them views.

One literal kernel (``_movement_kernels.py``) copies between two strided
views through each element's logical row-major index: x seen in y's shape
for a transpose (axes permuted) or a slice (offset, strides times steps),
x as it is for a reshape, and for a concatenate one launch per piece into
its slice of y. Each side's adjacent axes that are contiguous in memory are
merged, and size-1 axes dropped, so any rank up to 6 after merging runs;
float io may change precision on the way (y's dtype is the graph's).
"""

from __future__ import annotations

from collections.abc import Sequence

from sigdnn.dtypes import DataType
from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import stride_order
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.source import KernelSource, literal
from sigdnn.plan_builders.cutile.steps import Arg, Launch
from sigdnn.plan_builders.cutile.tiling import cdiv
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.signature_keys import SignatureKey

TILE = 1024  # elements one block copies
RANK = 6  # axes the kernel takes on each side
LARGEST = 2**31 - 1 - TILE  # int32 flat and logical indices
FLOATS = frozenset({DataType.FLOAT32, DataType.FLOAT16, DataType.BFLOAT16})
INTEGERS = frozenset({DataType.INT8, DataType.UINT8, DataType.INT32, DataType.INT64})

Side = tuple[tuple[int, ...], tuple[int, ...], int]  # (dims, strides, element offset) of one view


def kernel_source() -> KernelSource:
    return literal("_movement_kernels.py", "strided_copy", "movement")


def merged(dims: Sequence[int], strides: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The same view (and the same row-major order) with size-1 axes dropped and contiguous neighbours merged."""
    out_d: list[int] = []
    out_s: list[int] = []
    for d, s in zip(dims, strides):
        if d == 1:
            continue
        if out_d and out_s[-1] == s * d:
            out_d[-1] *= d
            out_s[-1] = s
        else:
            out_d.append(d)
            out_s.append(s)
    return tuple(out_d), tuple(out_s)


def padded(side: Side) -> Side:
    dims, strides, offset = side
    dims, strides = merged(dims, strides)
    if len(dims) > RANK:
        raise ValueError(f"{len(dims)} axes after merging contiguous ones; the copy kernel takes {RANK}")
    missing = RANK - len(dims)
    return (1,) * missing + dims, (1,) * missing + strides, offset


def row_major(dims: Sequence[int]) -> tuple[int, ...]:
    """Per axis, the elements of the axes after it."""
    out, inner = [1] * len(dims), 1
    for axis in reversed(range(len(dims))):
        out[axis] = inner
        inner *= dims[axis]
    return tuple(out)


def memory_divisors(dims: Sequence[int], strides: Sequence[int]) -> tuple[int, ...]:
    out, inner = [1] * len(dims), 1
    for axis in reversed(stride_order(strides)):
        out[axis] = inner
        inner *= dims[axis]
    return tuple(out)


def copy(src: Side, dst: Side, port: str = "x") -> Launch:
    """One launch copying the view ``src`` (of input ``port``) into ``dst`` (of y) in logical row-major order."""
    (sd, ss, so), (dd, ds, do) = padded(src), padded(dst)
    count = 1
    for d in dd:
        count *= d
    constants = (count, *memory_divisors(dd, ds), *dd, *row_major(dd), *row_major(sd), *sd, TILE)
    args = (Arg(port, sd, ss, so), Arg("y", dd, ds, do))
    return Launch(kernel_source(), (cdiv(count, TILE), 1, 1), args, constants)


def _whole(t: Tensor) -> Side:
    return t.dims, t.strides, 0


def _launches(node: Node, graph: Graph) -> list[Launch]:
    op = node.op
    y = graph.tensors[op.y]
    if op.kind == "transpose":
        x = graph.tensors[op.x]
        return [copy((y.dims, tuple(x.strides[a] for a in op.permutation), 0), _whole(y))]
    if op.kind == "slice":
        x = graph.tensors[op.x]
        strides = tuple(s * k for s, k in zip(x.strides, op.strides))
        return [copy((y.dims, strides, sum(a * s for a, s in zip(op.start_indices, x.strides))), _whole(y))]
    if op.kind == "reshape":
        return [copy(_whole(graph.tensors[op.x]), _whole(y))]
    launches, at = [], 0
    for i, uid in enumerate(op.x):
        piece = graph.tensors[uid]
        launches.append(copy(_whole(piece), (piece.dims, y.strides, at * y.strides[op.axis]), f"x_{i}"))
        at += piece.dims[op.axis]
    return launches


class CutileMovementBuilder(CutileLaunchesBuilder):
    name = "cutile.movement"
    engine_id = IN_TREE[name]
    ops = ("reshape", "transpose", "slice", "concatenate")

    def serves(self, key: SignatureKey) -> bool:
        dtypes = {d for _, d in (*key.inputs, *key.outputs)}
        return key.op in self.ops and (dtypes <= FLOATS or (len(dtypes) == 1 and dtypes <= INTEGERS))

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        return _launches(node, graph), 0

    def _plan(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        where = f"node '{node.name}'"
        tensors = [graph.tensors[u] for u in node.op.ports().values()]
        dtypes = {graph.dtype_of(t) for t in tensors}
        if not (dtypes <= FLOATS or (len(dtypes) == 1 and dtypes <= INTEGERS)):
            raise NotSupported(f"{where}: dtypes {sorted(map(str, dtypes))}; {self.name} copies 32- and 16-bit "
                               "floats (converting between them) or one integer dtype")  # fmt: skip
        for t in tensors:
            if t.size > LARGEST or 1 + sum((d - 1) * s for d, s in zip(t.dims, t.strides)) > LARGEST:
                raise NotSupported(f"{where}: tensor '{t.name}' spans 2^31 elements or more (int32 indices)")
        try:
            return self.launches(node, graph)
        except ValueError as e:
            raise NotSupported(f"{where}: {e}") from None
