"""Reference softmax / log-softmax with optional statistics (math.softmax)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.softmax import Softmax
from sigdnn.plan_builders.reference import math
from sigdnn.plan_builders.reference.base import FloatReferenceBuilder, NarrowCompute
from sigdnn.plan_builders.reference.math.sink import Sink
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE


class ReferenceSoftmax(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.softmax"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("softmax",)
    reads_narrow: ClassVar[bool] = True  # y is rounded into its output block by block

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> NarrowCompute:
        op: Softmax = node.op

        def compute(ins: dict[str, np.ndarray], sinks: dict[str, Sink]) -> dict[str, np.ndarray]:
            y, stats = math.softmax(ins["x"], op.axes, op.log, sinks["y"])
            assert y is None  # written through the sink
            return {"stats": stats} if op.stats is not None else {}

        return compute
