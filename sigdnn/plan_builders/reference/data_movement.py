"""Reference reshape, transpose, slice and concatenate: element copies, exact for every dtype.

No value goes through float64 when the dtypes match (an int64 above 2**53
or a NaN payload stays as it is); a different output dtype is one rounding
of the exact value (int64 for integer and bool inputs, float64 otherwise).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from sigdnn.dtypes import DataType, rounder
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.concatenate import Concatenate
from sigdnn.graph.ops.reshape import Reshape
from sigdnn.graph.ops.slice import Slice
from sigdnn.graph.ops.transpose import Transpose
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import ExecutionContext

Placement = Callable[[Mapping[str, np.ndarray], np.ndarray], None]


def copy_into(out: np.ndarray, value: np.ndarray, dtype: DataType) -> None:
    """Write ``value`` into ``out``: a plain copy for equal dtypes, else one rounding to ``dtype``."""
    if value.dtype == out.dtype:
        np.copyto(out, value)
        return
    exact = value.astype(np.int64 if value.dtype.kind in "biu" else np.float64)
    with np.errstate(all="ignore"):
        np.copyto(out, rounder(dtype)(exact), casting="unsafe")


class MovePlan(NodePlan):
    """Runs ``place(inputs, out)``, which copies each input element to its place in y."""

    def __init__(self, place: Placement) -> None:
        self._place = place

    def execute(self, buffers: Mapping[str, Any], context: ExecutionContext | None = None) -> None:
        self._place({p: a for p, a in buffers.items() if p != "y"}, buffers["y"])


class MoveBuilder(PlanBuilder):
    """A reference data movement builder: ``placement`` says where x's elements go; no arithmetic, any dtype."""

    library: ClassVar[str] = "reference"
    device: ClassVar[str] = "cpu"

    @abstractmethod
    def placement(self, node: Node, graph: Graph, dtype: DataType) -> Placement:
        """Copies the inputs' elements into y (of ``dtype``)."""

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        return MovePlan(self.placement(node, graph, dict(context.key.outputs)["y"]))


class ReferenceReshape(MoveBuilder):
    name: ClassVar[str] = "reference.reshape"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("reshape",)

    def placement(self, node: Node, graph: Graph, dtype: DataType) -> Placement:
        op: Reshape = node.op
        return lambda ins, out: copy_into(out, ins["x"].reshape(op.dims), dtype)


class ReferenceTranspose(MoveBuilder):
    name: ClassVar[str] = "reference.transpose"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("transpose",)

    def placement(self, node: Node, graph: Graph, dtype: DataType) -> Placement:
        op: Transpose = node.op
        return lambda ins, out: copy_into(out, ins["x"].transpose(op.permutation), dtype)


class ReferenceSlice(MoveBuilder):
    name: ClassVar[str] = "reference.slice"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("slice",)

    def placement(self, node: Node, graph: Graph, dtype: DataType) -> Placement:
        op: Slice = node.op
        index = tuple(slice(*bounds) for bounds in zip(op.start_indices, op.limit_indices, op.strides))
        return lambda ins, out: copy_into(out, ins["x"][index], dtype)


class ReferenceConcatenate(MoveBuilder):
    name: ClassVar[str] = "reference.concatenate"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("concatenate",)

    def placement(self, node: Node, graph: Graph, dtype: DataType) -> Placement:
        op: Concatenate = node.op
        pieces = []  # (port, slice of y along the axis)
        start = 0
        for port, uid in op.inputs().items():
            extent = graph.tensors[uid].dims[op.axis]
            pieces.append((port, (slice(None),) * op.axis + (slice(start, start + extent),)))
            start += extent

        def place(ins: Mapping[str, np.ndarray], out: np.ndarray) -> None:
            for port, where in pieces:
                copy_into(out[where], ins[port], dtype)

        return place
