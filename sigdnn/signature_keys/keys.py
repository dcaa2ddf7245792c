"""One key class per op family, and key_for(node, graph)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import attrs

from sigdnn.dtypes import DataType
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops import ConvFprop, Matmul, Op, Pointwise
from sigdnn.signature_keys.base import SignatureKey, short


@attrs.frozen
class PointwiseKey(SignatureKey):
    family: ClassVar[str] = "pointwise"
    mode: str
    inputs: tuple[DataType, ...]
    output: DataType
    compute: DataType

    def __str__(self) -> str:
        return f"Pointwise[{self.mode}]({short(self.inputs)}->{self.output.short}; {self.compute.short})"


@attrs.frozen
class MatmulKey(SignatureKey):
    family: ClassVar[str] = "matmul"
    a: DataType
    b: DataType
    c: DataType
    compute: DataType

    def __str__(self) -> str:
        return f"Matmul({self.a.short},{self.b.short}->{self.c.short}; {self.compute.short})"


@attrs.frozen
class ConvFpropKey(SignatureKey):
    family: ClassVar[str] = "conv_fprop"
    x: DataType
    w: DataType
    y: DataType
    compute: DataType
    spatial_rank: int

    def __str__(self) -> str:
        return f"ConvFprop{self.spatial_rank}d({self.x.short},{self.w.short}->{self.y.short}; {self.compute.short})"


def _pointwise(op: Pointwise, node: Node, graph: Graph) -> PointwiseKey:
    dt = [graph.dtype_of(graph.tensors[u]) for u in op.inputs().values()]
    return PointwiseKey(op.mode, tuple(dt), graph.dtype_of(graph.tensors[op.out_0]), graph.compute_dtype_of(node))


def _matmul(op: Matmul, node: Node, graph: Graph) -> MatmulKey:
    a, b, c = (graph.dtype_of(graph.tensors[u]) for u in (op.a, op.b, op.c))
    return MatmulKey(a, b, c, graph.compute_dtype_of(node))


def _conv_fprop(op: ConvFprop, node: Node, graph: Graph) -> ConvFpropKey:
    x, w, y = (graph.dtype_of(graph.tensors[u]) for u in (op.x, op.w, op.y))
    return ConvFpropKey(x, w, y, graph.compute_dtype_of(node), op.spatial_rank)


_KEY_MAKERS: dict[type[Op], Callable[..., SignatureKey]] = {
    Pointwise: _pointwise,
    Matmul: _matmul,
    ConvFprop: _conv_fprop,
}


def key_for(node: Node, graph: Graph) -> SignatureKey:
    """The signature key of ``node`` (its tensors' dtypes resolved in ``graph``)."""
    return _KEY_MAKERS[type(node.op)](node.op, node, graph)
