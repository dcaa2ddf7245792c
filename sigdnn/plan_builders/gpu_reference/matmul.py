"""GPU reference matmul: a batched float64 GEMM (float64 products and sums; exact products for inputs of float32
or narrower).

Batch dims broadcast as in NumPy (a gather makes each operand's full batch).
Integer compute (int64 operands) takes the definition literally: every
product a[m, k] b[k, n] in int64, summed over k with int64's wrapping, as
the CPU reference's integer product.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.gpu_reference.arrays import Array
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.registry.engine_ids import IN_TREE


def batched(a: Array, b: Array) -> tuple[Array, Array, tuple[int, ...]]:
    """a and b broadcast to one batch shape and flattened to (B, M, K) and (B, K, N); and the batch shape."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    flat = math.prod(batch)
    a3 = a.broadcast_to((*batch, *a.shape[-2:])).reshape(flat, *a.shape[-2:])
    b3 = b.broadcast_to((*batch, *b.shape[-2:])).reshape(flat, *b.shape[-2:])
    return a3, b3, tuple(batch)


def matmul(a: Array, b: Array) -> Array:
    """a @ b with NumPy's batch broadcasting (float64 sums, or int64 products summed with wrapping)."""
    a3, b3, batch = batched(a, b)
    c = a3.matmul(b3)
    return c.reshape(*batch, c.shape[1], c.shape[2])


class GpuReferenceMatmul(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.matmul"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("matmul",)
    float_only: ClassVar[bool] = False

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        """int64 only when the compute type and both inputs are integers (as the CPU reference)."""
        inputs = (graph.dtype_of(graph.tensors[uid]) for uid in (node.op.a, node.op.b))
        return graph.compute_dtype_of(node).is_integer and all(dt.is_integer for dt in inputs)

    def formula(self, node: Node, graph: Graph) -> Formula:
        return lambda i: {"c": matmul(i["a"], i["b"])}
