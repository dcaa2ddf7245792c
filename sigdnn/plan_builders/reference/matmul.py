"""Reference matmul: float64 (int64 for integer compute) batched product."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.plan_builders.reference.base import ReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE

_EXACT = 2**53  # float64 holds every integer below this exactly


def integer_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b for int64 arrays, exact (wrapping modulo 2**64 like int64 arithmetic), at BLAS speed.

    NumPy's integer matmul is a plain loop (minutes at 2048^3). When every
    partial sum fits float64's 53 bits, one float64 GEMM is exact. Otherwise
    the operands are cut into L-bit limbs of their two's complement bits,
    small enough that each limb product sums exactly in float64, and the
    limb products are shifted and added in uint64, which wraps as int64 does.
    """
    k = a.shape[-1]
    largest = max(int(np.abs(a).max(initial=0)), 1) * max(int(np.abs(b).max(initial=0)), 1)
    if largest * k < _EXACT and a.min(initial=0) > -(2**62) and b.min(initial=0) > -(2**62):
        return np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(np.int64)
    bits = (_EXACT // max(k, 1)).bit_length() - 1  # (2^L)^2 * k <= 2^53
    limb = max(1, bits // 2)
    count = -(-64 // limb)
    mask = np.uint64((1 << limb) - 1)
    ua, ub = a.view(np.uint64), b.view(np.uint64)
    pieces_a = [((ua >> np.uint64(limb * i)) & mask).astype(np.float64) for i in range(count)]
    pieces_b = [((ub >> np.uint64(limb * j)) & mask).astype(np.float64) for j in range(count)]
    total: np.ndarray | None = None
    for i in range(count):
        for j in range(count - i):  # i + j < count: each shift limb * (i + j) is below 64
            part = np.matmul(pieces_a[i], pieces_b[j]).astype(np.uint64) << np.uint64(limb * (i + j))
            total = part if total is None else total + part
    assert total is not None
    return total.view(np.int64)


class ReferenceMatmul(ReferenceBuilder):
    name: ClassVar[str] = "reference.matmul"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("matmul",)

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        """int64 only when the compute type and both inputs are integers.

        An integer compute type over float inputs would read them as
        truncated int64; the reference computes those in float64 instead,
        at least as precise as any compute type, as it does for float ones.
        """
        op: Matmul = node.op
        inputs = (graph.dtype_of(graph.tensors[uid]) for uid in (op.a, op.b))
        return graph.compute_dtype_of(node).is_integer and all(dt.is_integer for dt in inputs)

    def make_compute(
        self, node: Node, graph: Graph, context: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        # An integer product stays int64: round_to rounds it to a float output dtype once.
        if self.computes_in_integers(node, graph):
            return lambda ins: {"c": integer_matmul(ins["a"], ins["b"])}
        return lambda ins: {"c": np.matmul(ins["a"], ins["b"])}
