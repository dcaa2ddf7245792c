"""conv_fprop: y = x ⋆ w (cross-correlation), 1 to 3 spatial dims, grouped.

x is [N, C, spatial...], w is [K, C/groups, kernel...], y is [N, K, out...]
in logical (NC-first) dims whatever the memory layout. groups = C / w's C.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.limits import Limits
from sigdnn.graph.ops.base import require_float
from sigdnn.graph.ops.conv_window import WINDOW_WIRE_FIELDS, ConvWindowOp
from sigdnn.graph.ops.shapes import packed_in_order_of
from sigdnn.graph.ops.windows import (
    check_taps,
    padded_bytes,
    spatial_rank,
)
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class ConvFprop(ConvWindowOp):
    kind: ClassVar[str] = "conv_fprop"
    table: ClassVar[str] = "ConvFpropAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x", "w")
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("x", "uid"),
        ("w", "uid"),
        ("y", "uid"),
        *WINDOW_WIRE_FIELDS,
    )

    x: int
    w: int
    y: int

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        return math.prod(tensors["w"].dims[1:])

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """Multiply-adds: every element of y takes C/groups x taps of them."""
        return tensors["y"].size * math.prod(tensors["w"].dims[1:])

    def groups(self, inputs: Mapping[str, Tensor]) -> int:
        return inputs["x"].dims[1] // inputs["w"].dims[1]

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x = graph.tensor("x", (2, 4, 5, 6), layout="NHWC")
        w = graph.tensor("w", (6, 2, 3, 3), layout="NHWC")  # two groups
        graph.conv_fprop(x, w, padding=(1, 0), stride=(2, 1), dilation=(1, 2), name="conv").set_output(True)
        return graph.nodes[-1]

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x, w = inputs["x"], inputs["w"]
        where = f"conv_fprop(x='{x.name}', w='{w.name}')"
        s = spatial_rank(where, "x", x)
        if w.rank != x.rank:
            raise GraphError(f"{where}: w has rank {w.rank}, x has rank {x.rank}; they must match")
        self.check_window(where, s)
        n, c = x.dims[:2]
        k, cg = w.dims[:2]
        if c % cg:
            raise GraphError(f"{where}: w's channel count {cg} does not divide x's {c}")
        groups = c // cg
        if k % groups:
            raise GraphError(f"{where}: {groups} groups do not divide w's output channels {k}")
        out = self.forward_outputs(where, x.dims[2:], w.dims[2:])
        return {"y": (n, k, *out)}

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """The padded float64 copy of x (padding is a free attribute), and a bound on kernel taps.

        Taps bound time where memory does not: a kernel broadcast from two
        tiny inputs can have millions of taps, each one pass over the output.
        """
        x, w = inputs["x"], inputs["w"]
        check_taps(f"kernel '{w.name}'", w.dims[2:], limits)
        return padded_bytes(x.dims, self.pre_padding, self.post_padding)

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"conv_fprop '{outputs['y'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """y packed in x's axis order."""
        return packed_in_order_of(inputs["x"], dims)
