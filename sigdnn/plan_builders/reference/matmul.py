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
        return lambda ins: {"c": np.matmul(ins["a"], ins["b"])}
