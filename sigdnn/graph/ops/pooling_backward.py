"""pooling_backward: dx from dy and the forward's x, for pooling's modes and windows (pooling.py).

Max pooling sends each dy element to its window's first maximum of x (in
row-major tap order); the averages spread it over the window by the same
divisor as the forward. dy must have the pooled dims of x.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from sigdnn.graph.limits import Limits
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.pooling import MODES, window_of
from sigdnn.graph.ops.shapes import packed_in_order_of, require_dims
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class PoolingBackward(Op):
    kind: ClassVar[str] = "pooling_backward"
    table: ClassVar[str] = "PoolingBackwardAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("dy", "x")
    output_ports: ClassVar[tuple[str, ...]] = ("dx",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("mode", "enum"),
        ("dy", "uid"),
        ("x", "uid"),
        ("dx", "uid"),
        ("window", "i64[]"),
        ("pre_padding", "i64[]"),
        ("post_padding", "i64[]"),
        ("stride", "i64[]"),
    )
    enums: ClassVar[dict[str, tuple[str, ...]]] = {"mode": MODES}
    enum_types: ClassVar[dict[str, str]] = {"mode": "PoolingMode"}
    key_attributes: ClassVar[tuple[str, ...]] = ("mode",)

    mode: str
    dy: int
    x: int
    dx: int
    window: tuple[int, ...]
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]

    @property
    def sums_absolute_terms(self) -> bool:  # type: ignore[override]
        return self.mode != "max"

    def key_traits(self, tensors: Mapping[str, Tensor]) -> tuple[tuple[str, Any], ...]:
        return (*super().key_traits(tensors), ("spatial_rank", len(self.window)))

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """A dx element gathers from every window that covers it: at most the window's taps."""
        return math.prod(self.window)

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        return tensors["dy"].size * math.prod(self.window) * 2 + tensors["x"].size

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x, dy = inputs["x"], inputs["dy"]
        where = f"pooling_backward[{self.mode}](x='{x.name}')"
        pooled = window_of(self).outputs(where, self.mode, "x", x)
        require_dims(where, "dy", dy, pooled, "x's pooled dims")
        return {"dx": x.dims}

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """A padded dx and, for max, a padded x."""
        one = window_of(self).scratch_bytes(inputs["x"], limits)
        return 2 * one if self.mode == "max" else one

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"pooling_backward '{outputs['dx'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["x"], dims)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x, dy = graph.tensor("x", (2, 3, 5, 6), layout="NHWC"), graph.tensor("dy", (2, 3, 3, 3))
        kw = {"pre_padding": (1, 0), "post_padding": (1, 1), "name": "pooling_backward"}
        graph.pooling_backward(dy, x, "max", (3, 2), (2, 2), **kw).set_output(True)
        return graph.nodes[-1]
