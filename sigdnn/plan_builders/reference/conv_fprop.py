"""Reference conv_fprop: cross-correlation in float64, 1-3 spatial dims, grouped.

One batched matrix product per kernel tap: y[n,g,k,out] += w[g,k,c,tap] @
x_padded[n,g,c,tap + stride*out]. That keeps NumPy in BLAS and memory at
one padded copy of x, instead of an im2col buffer kernel-size times larger.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops import ConvFprop
from sigdnn.plan_builders.reference.base import ReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.signature_keys import ConvFpropKey


def conv_fprop(x: np.ndarray, w: np.ndarray, op: ConvFprop, out_dims: tuple[int, ...]) -> np.ndarray:
    """y for float64 x [N,C,*S] and w [K,C/G,*R]; padding, stride, dilation from op."""
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    groups = c // cg
    spatial = x.ndim - 2
    out = out_dims[2:]
    pad = [(0, 0), (0, 0), *list(zip(op.pre_padding, op.post_padding))]
    xp = np.pad(x, pad).reshape(
        n, groups, cg, *[x.shape[2 + i] + op.pre_padding[i] + op.post_padding[i] for i in range(spatial)]
    )
    wg = w.reshape(groups, k // groups, cg, *w.shape[2:])
    y = np.zeros((n, groups, k // groups, int(np.prod(out))), dtype=np.float64)
    for tap in itertools.product(*(range(r) for r in w.shape[2:])):
        window = tuple(
            slice(tap[i] * op.dilation[i], tap[i] * op.dilation[i] + op.stride[i] * (out[i] - 1) + 1, op.stride[i])
            for i in range(spatial)
        )
        xs = xp[(slice(None), slice(None), slice(None), *window)].reshape(n, groups, cg, -1)
        y += np.matmul(wg[(slice(None), slice(None), slice(None), *tap)], xs)
    return y.reshape(n, k, *out)


class ReferenceConvFprop(ReferenceBuilder):
    name: ClassVar[str] = "reference.conv_fprop"
    engine_id: ClassVar[int] = 1002
    key_type: ClassVar[type] = ConvFpropKey

    def make_compute(
        self, node: Node, graph: Graph, ctx: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        op: ConvFprop = node.op
        out_dims = graph.tensors[op.y].dims
        return lambda ins: {"y": conv_fprop(ins["x"], ins["w"], op, out_dims)}
