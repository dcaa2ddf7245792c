"""Reference resample and its backward: nearest / (bi/tri)linear interpolation (math.resample)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.resample import Resample
from sigdnn.graph.ops.resample_backward import ResampleBackward
from sigdnn.plan_builders.reference import math
from sigdnn.plan_builders.reference.base import FloatReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE


class ReferenceResample(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.resample"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("resample",)

    def make_compute(
        self, node: Node, graph: Graph, context: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        op: Resample = node.op
        scales = op.scales or None
        return lambda ins: {"y": math.resample(ins["x"], op.mode, op.dims, scales, op.coordinates)}


class ReferenceResampleBackward(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.resample_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("resample_backward",)

    def make_compute(
        self, node: Node, graph: Graph, context: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        op: ResampleBackward = node.op
        scales = op.scales or None
        return lambda ins: {"dx": math.resample_backward(ins["dy"], op.dims, op.mode, scales, op.coordinates)}
