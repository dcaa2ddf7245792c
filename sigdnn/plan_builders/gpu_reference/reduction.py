"""GPU reference reduction: every mode as a pre-map, a row reduction and a post-map, in float64 or int64.

The reduced axes are those where y's dim is 1 and x's is not. avg and norm2
are float only (the node computes them in float64 whatever its compute
type, as the CPU reference); norm2 sums the squares unscaled, which equals
the CPU reference's power-of-two scaled sum except past 1e154 (float64
inputs only).
"""

from __future__ import annotations

import math
from typing import ClassVar

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.gpu_reference.arrays import Array, where
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.registry.engine_ids import IN_TREE

FLOAT_ONLY_MODES = ("avg", "norm2")


def reduce(x: Array, mode: str, axes: tuple[int, ...]) -> Array:
    if mode == "add":
        return x.reduce("SUM", axes)
    if mode == "mul":
        return x.reduce("PROD", axes)
    if mode == "min":
        return x.reduce("MIN", axes)
    if mode == "max":
        return x.reduce("MAX", axes)
    if mode == "amax":
        return x.apply("ABS").reduce("MAX", axes)
    if mode == "avg":
        return x.reduce("SUM", axes) / float(math.prod(x.shape[a] for a in axes))
    if mode == "norm1":
        return x.apply("ABS").reduce("SUM", axes)
    if mode == "norm2":
        return (x * x).reduce("SUM", axes).apply("SQRT")
    return where(x == 0, 1, x).reduce("PROD", axes)  # mul_no_zeros


class GpuReferenceReduction(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.reduction"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("reduction",)
    float_only: ClassVar[bool] = False

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        x = graph.dtype_of(graph.tensors[node.op.x])
        integer = graph.compute_dtype_of(node).is_integer and (x.is_integer or x.name == "BOOL")
        return integer and node.op.mode not in FLOAT_ONLY_MODES

    def formula(self, node: Node, graph: Graph) -> Formula:
        x_dims, y_dims = graph.tensors[node.op.x].dims, graph.tensors[node.op.y].dims
        axes = tuple(a for a, (d, o) in enumerate(zip(x_dims, y_dims, strict=True)) if o == 1 and d != 1)
        mode = node.op.mode
        return lambda i: {"y": reduce(i["x"], mode, axes)}  # no axis reduced still maps (|x| for the norms)
