"""Reference pooling, forward and backward (math.pooling)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.pooling import Pooling
from sigdnn.graph.ops.pooling_backward import PoolingBackward
from sigdnn.plan_builders.reference import math
from sigdnn.plan_builders.reference.base import FloatReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE

Compute = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


class ReferencePooling(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.pooling"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("pooling",)

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        op: Pooling = node.op
        window = (op.window, op.pre_padding, op.post_padding, op.stride)
        return lambda ins: {"y": math.pooling_forward(ins["x"], op.mode, *window)}


class ReferencePoolingBackward(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.pooling_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("pooling_backward",)

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        op: PoolingBackward = node.op
        window = (op.window, op.pre_padding, op.post_padding, op.stride)
        return lambda ins: {"dx": math.pooling_backward(ins["dy"], ins["x"], op.mode, *window)}
