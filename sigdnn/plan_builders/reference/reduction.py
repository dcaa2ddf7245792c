"""Reference reduction (math.reduction): float64, or exact int64 when the node computes in integers."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.reduction import Reduction
from sigdnn.plan_builders.reference import math
from sigdnn.plan_builders.reference.base import ReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE

FLOAT_ONLY_MODES = ("avg", "norm2")  # no exact integer result


class ReferenceReduction(ReferenceBuilder):
    name: ClassVar[str] = "reference.reduction"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("reduction",)

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        """int64 when the compute type and x are integers and the mode has an exact integer result.

        Otherwise float64, at least as precise as any compute type (as matmul
        does); avg and norm2 of integers then round once to the output dtype.
        """
        op: Reduction = node.op
        x = graph.dtype_of(graph.tensors[op.x])
        integer = graph.compute_dtype_of(node).is_integer and (x.is_integer or x.name == "BOOL")
        return integer and op.mode not in FLOAT_ONLY_MODES

    def make_compute(
        self, node: Node, graph: Graph, context: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        op: Reduction = node.op
        dims = graph.tensors[op.y].dims
        return lambda ins: {"y": math.reduction(ins["x"], op.mode, dims)}
