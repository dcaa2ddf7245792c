"""Reference conv_dgrad and conv_wgrad: the adjoints of conv_fprop in float64 (math.conv_backward)."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_dgrad import ConvDgrad
from sigdnn.graph.ops.conv_wgrad import ConvWgrad
from sigdnn.plan_builders.reference.base import FloatReferenceBuilder, NarrowCompute
from sigdnn.plan_builders.reference.math import conv_dgrad, conv_wgrad
from sigdnn.plan_builders.reference.math.sink import Sink
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE


class ReferenceConvDgrad(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.conv_dgrad"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_dgrad",)
    reads_narrow: ClassVar[bool] = True  # dy widens where it is read, dx is rounded phase by phase

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> NarrowCompute:
        op: ConvDgrad = node.op
        dims = graph.tensors[op.dx].dims
        geometry = (op.pre_padding, op.post_padding, op.stride, op.dilation)

        def compute(ins: dict[str, np.ndarray], sinks: dict[str, Sink]) -> dict[str, np.ndarray]:
            conv_dgrad(ins["dy"], ins["w"], *geometry, dims, sinks["dx"])
            return {}

        return compute


class ReferenceConvWgrad(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.conv_wgrad"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_wgrad",)
    reads_narrow: ClassVar[bool] = True  # x widens in its im2col copy, dy chunk by chunk; dw is small

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> NarrowCompute:
        op: ConvWgrad = node.op
        dims = graph.tensors[op.dw].dims
        geometry = (op.pre_padding, op.post_padding, op.stride, op.dilation)
        return lambda ins, sinks: {"dw": conv_wgrad(ins["x"], ins["dy"], *geometry, dims)}
