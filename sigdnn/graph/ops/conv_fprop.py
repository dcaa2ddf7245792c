"""conv_fprop: y = x ⋆ w (cross-correlation), 1 to 3 spatial dims, grouped.

x is [N, C, spatial...], w is [K, C/groups, kernel...], y is [N, K, out...]
in logical (NC-first) dims whatever the memory layout. groups = C / w's C.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.layout import packed_strides
from sigdnn.graph.limits import Limits
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class ConvFprop(Op):
    kind: ClassVar[str] = "conv_fprop"
    table: ClassVar[str] = "ConvFpropAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x", "w")
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("x", "uid"),
        ("w", "uid"),
        ("y", "uid"),
        ("pre_padding", "i64[]"),
        ("post_padding", "i64[]"),
        ("stride", "i64[]"),
        ("dilation", "i64[]"),
    )

    x: int
    w: int
    y: int
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]

    sums_absolute_terms: ClassVar[bool] = True

    @property
    def spatial_rank(self) -> int:
        return len(self.stride)

    def key_traits(self, tensors: Mapping[str, Tensor]) -> tuple[tuple[str, Any], ...]:
        return (("spatial_rank", self.spatial_rank),)

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
        s = x.rank - 2
        if not 1 <= s <= 3:
            raise GraphError(f"{where}: x has rank {x.rank} ({s} spatial dims); 1 to 3 spatial dims are supported")
        if w.rank != x.rank:
            raise GraphError(f"{where}: w has rank {w.rank}, x has rank {x.rank}; they must match")
        for name in ("stride", "dilation", "pre_padding", "post_padding"):
            if len(getattr(self, name)) != s:
                raise GraphError(f"{where}: {name} has {len(getattr(self, name))} entries for {s} spatial dims")
        if min(self.stride) < 1 or min(self.dilation) < 1:
            raise GraphError(f"{where}: stride {list(self.stride)} and dilation {list(self.dilation)} must be >= 1")
        if min(self.pre_padding) < 0 or min(self.post_padding) < 0:
            raise GraphError(
                f"{where}: padding must be >= 0, got pre {list(self.pre_padding)} post {list(self.post_padding)}"
            )
        n, c = x.dims[:2]
        k, cg = w.dims[:2]
        if c % cg:
            raise GraphError(f"{where}: w's channel count {cg} does not divide x's {c}")
        groups = c // cg
        if k % groups:
            raise GraphError(f"{where}: {groups} groups do not divide w's output channels {k}")
        out = []
        for i in range(s):
            span = self.dilation[i] * (w.dims[2 + i] - 1) + 1
            padded = x.dims[2 + i] + self.pre_padding[i] + self.post_padding[i]
            if padded < span:
                raise GraphError(
                    f"{where}: spatial dim {i}: padded input {padded} is smaller than the dilated kernel {span}"
                )
            out.append((padded - span) // self.stride[i] + 1)
        return {"y": (n, k, *out)}

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """The padded float64 copy of x (padding is a free attribute), and a bound on kernel taps.

        Taps bound time where memory does not: a kernel broadcast from two
        tiny inputs can have millions of taps, each one pass over the output.
        """
        x, w = inputs["x"], inputs["w"]
        taps = math.prod(w.dims[2:])
        if taps > limits.max_kernel_taps:
            raise GraphError(f"kernel '{w.name}' {list(w.dims)} has {taps} taps (limit {limits.max_kernel_taps})")
        elements = x.dims[0] * x.dims[1]
        for i, d in enumerate(x.dims[2:]):
            elements *= d + self.pre_padding[i] + self.post_padding[i]
        return elements * 8

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"conv_fprop '{outputs['y'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """y packed in x's axis order.

        A size-1 axis of x may carry any stride, so it can tie with a real
        one: NHWC x with C = 1 has stride 1 on both C and W. At equal strides
        the size-1 axis counts as the inner one, else y (K > 1) would come out
        N,H,K,W instead of NHWC.
        """
        x = inputs["x"]
        order = sorted(range(x.rank), key=lambda a: (-x.strides[a], x.dims[a] == 1, a))
        return packed_strides(dims, order)
