"""Reference conv_fprop: cross-correlation in float64, 1-3 spatial dims, grouped.

The math is sigdnn.plan_builders.reference.math.conv_forward: im2col chunks
times one weight matrix, oriented by x's layout, the batch folded into each
GEMM (see there for why it is fast).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.plan_builders.declines import decline_non_float
from sigdnn.plan_builders.reference.base import NarrowCompute, ReferenceBuilder
from sigdnn.plan_builders.reference.math.conv_forward import conv_forward
from sigdnn.plan_builders.reference.math.sink import Sink
from sigdnn.plan_builders.reference.math.windows import out_size
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device


def conv_fprop(
    x: np.ndarray, w: np.ndarray, op: ConvFprop, out_dims: tuple[int, ...], y: Sink | None = None
) -> np.ndarray | None:
    """y for x [N,C,*S] and w [K,C/G,*R] (float64, float32 or float16); padding, stride, dilation from op.
    With a Sink, y is rounded into it chunk by chunk and None comes back."""
    geometry = zip(x.shape[2:], op.pre_padding, op.post_padding, w.shape[2:], op.stride, op.dilation)
    dims = [x.shape[0], w.shape[0], *(out_size(*a) for a in geometry)]
    if list(out_dims) != dims:
        raise ValueError(f"conv_fprop: y's dims {list(out_dims)} are not the convolution's {dims}")
    return conv_forward(x, w, op.pre_padding, op.post_padding, op.stride, op.dilation, y)


class ReferenceConvFprop(ReferenceBuilder):
    name: ClassVar[str] = "reference.conv_fprop"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_fprop",)
    reads_narrow: ClassVar[bool] = True  # x widens in its im2col copy, y is rounded chunk by chunk

    def check(self, node: Node, graph: Graph, device: Device) -> None:
        """Decline integer tensors (the op is floating point only; check_graph says so first)."""
        decline_non_float(node, graph)

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        """Never: an integer compute type would read the float inputs as truncated int64."""
        return False

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> NarrowCompute:
        op: ConvFprop = node.op
        out_dims = graph.tensors[op.y].dims

        def compute(ins: dict[str, np.ndarray], sinks: dict[str, Sink]) -> dict[str, np.ndarray]:
            conv_fprop(ins["x"], ins["w"], op, out_dims, sinks["y"])
            return {}

        return compute
