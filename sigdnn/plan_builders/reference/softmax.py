"""Reference softmax / log-softmax with optional statistics (math.softmax)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.softmax import Softmax
from sigdnn.plan_builders.reference import math
from sigdnn.plan_builders.reference.base import FloatReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE


class ReferenceSoftmax(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.softmax"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("softmax",)

    def make_compute(
        self, node: Node, graph: Graph, context: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        op: Softmax = node.op

        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            y, stats = math.softmax(ins["x"], op.axes, op.log)
            return {"y": y, "stats": stats} if op.stats is not None else {"y": y}

        return compute
