"""Reference conv_fprop: cross-correlation in float64, 1-3 spatial dims, grouped.

The math is sigdnn.plan_builders.reference.math.conv_forward: im2col chunks
times one weight matrix, oriented by x's layout, the batch folded into each
GEMM (see there for why it is fast).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.plan_builders.reference.base import ReferenceBuilder
from sigdnn.plan_builders.reference.math.conv_forward import conv_forward
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device


def conv_fprop(x: np.ndarray, w: np.ndarray, op: ConvFprop, out_dims: tuple[int, ...]) -> np.ndarray:
    """y for float64 x [N,C,*S] and w [K,C/G,*R]; padding, stride, dilation from op."""
    y = conv_forward(x, w, op.pre_padding, op.post_padding, op.stride, op.dilation)
    if y.shape != tuple(out_dims):
        raise ValueError(f"conv_fprop: y's dims {list(out_dims)} are not the convolution's {list(y.shape)}")
    return y


class ReferenceConvFprop(ReferenceBuilder):
    name: ClassVar[str] = "reference.conv_fprop"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("conv_fprop",)

    def check(self, node: Node, graph: Graph, device: Device) -> None:
        """Decline integer tensors (the op is floating point only; check_graph says so first)."""
        op: ConvFprop = node.op
        for port, uid in op.ports().items():
            dtype = graph.dtype_of(graph.tensors[uid])
            if not dtype.is_float:
                raise NotSupported(
                    f"node '{node.name}': port '{port}' (tensor '{graph.tensors[uid].name}') is {dtype}; "
                    "conv_fprop is floating point only"
                )

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        """Never: an integer compute type would read the float inputs as truncated int64."""
        return False

    def make_compute(
        self, node: Node, graph: Graph, context: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        op: ConvFprop = node.op
        out_dims = graph.tensors[op.y].dims
        return lambda ins: {"y": conv_fprop(ins["x"], ins["w"], op, out_dims)}
