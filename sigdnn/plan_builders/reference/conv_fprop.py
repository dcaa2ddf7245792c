"""Reference conv_fprop: cross-correlation in float64, 1-3 spatial dims, grouped.

Batched matrix products over chunks of kernel taps: y[n,g,k,out] +=
w[g,k,(tap,c)] @ x_padded[n,g,(tap,c),tap + stride*out]. A chunk gathers
just enough taps that the contraction is long enough for BLAS to be
efficient (one tap when C/groups is already large, all of them for a
depthwise or 3-channel first layer), under a memory cap, so memory stays
near one padded copy of x rather than a full im2col buffer.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.plan_builders.reference.base import ReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device

# Contraction length per matrix product we aim for, and the most scratch a tap chunk may take.
_TARGET_CONTRACTION = 64
_CHUNK_BYTES = 64 << 20


def conv_fprop(x: np.ndarray, w: np.ndarray, op: ConvFprop, out_dims: tuple[int, ...]) -> np.ndarray:
    """y for float64 x [N,C,*S] and w [K,C/G,*R]; padding, stride, dilation from op."""
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    groups, kg = c // cg, k // (c // cg)
    out = out_dims[2:]
    positions = math.prod(out)
    pad = [(0, 0), (0, 0), *zip(op.pre_padding, op.post_padding)]
    xp = np.pad(x, pad).reshape(
        n, groups, cg, *(s + a + b for s, a, b in zip(x.shape[2:], op.pre_padding, op.post_padding))
    )
    taps = list(itertools.product(*(range(r) for r in w.shape[2:])))
    # w as [G, K/G, tap, C/G]: the contraction index of a chunk is (tap, c), taps in itertools order.
    wt = w.reshape(groups, kg, cg, len(taps)).transpose(0, 1, 3, 2)
    tap_bytes = n * c * positions * 8
    chunk = max(1, min(len(taps), -(-_TARGET_CONTRACTION // cg), _CHUNK_BYTES // max(tap_bytes, 1)))

    def window(tap: tuple[int, ...]) -> np.ndarray:
        """The inputs tap ``tap`` meets at every output position: [N, G, C/G, positions]."""
        sl = tuple(slice(t * d, t * d + s * (o - 1) + 1, s) for t, d, s, o in zip(tap, op.dilation, op.stride, out))
        return xp[(slice(None), slice(None), slice(None), *sl)].reshape(n, groups, cg, positions)

    y: np.ndarray | None = None
    for start in range(0, len(taps), chunk):
        part = taps[start : start + chunk]
        if len(part) == 1:
            cols = window(part[0])
        else:
            cols = np.empty((n, groups, len(part), cg, positions), dtype=np.float64)
            for j, tap in enumerate(part):
                cols[:, :, j] = window(tap)
            cols = cols.reshape(n, groups, len(part) * cg, positions)
        product = np.matmul(wt[:, :, start : start + len(part)].reshape(groups, kg, len(part) * cg), cols)
        if y is None:
            y = product
        else:
            y += product
    assert y is not None  # a kernel has at least one tap
    return y.reshape(n, k, *out)


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
