"""softmax: y = exp(x - max) / sum exp(x - max) over ``axes`` (log softmax with ``log``); stats optional.

stats = max + log(sum exp(x - max)) (natural log) has x's dims with a 1 at
each softmax axis, float32 unless set, and is written exactly when
``generate_stats`` is set (docs/ops.md: the softmax axes are where the stats
are 1; the last axis by default).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.dtypes import DataType
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.shapes import STATS_DTYPE, batch_dims, check_axes, packed_in_order_of
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class Softmax(Op):
    kind: ClassVar[str] = "softmax"
    table: ClassVar[str] = "SoftmaxAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x",)
    output_ports: ClassVar[tuple[str, ...]] = ("y", "stats")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("x", "uid"),
        ("y", "uid"),
        ("stats", "uid?"),
        ("axes", "i64[]"),
        ("log", "bool"),
        ("generate_stats", "bool"),
    )
    key_attributes: ClassVar[tuple[str, ...]] = ("log",)

    x: int
    y: int
    axes: tuple[int, ...]
    stats: int | None = None
    log: bool = False
    generate_stats: bool = False

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        x = tensors["x"]
        return math.prod(x.dims[a] for a in self.axes)

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        check_axes(f"softmax(x='{x.name}')", "axes", self.axes, x.rank)
        if not self.generate_stats:
            return {"y": x.dims}
        return {"y": x.dims, "stats": batch_dims(x, self.axes)}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"softmax '{outputs['y'].name}'", {**inputs, **outputs})

    def output_dtype(self, port: str, inputs: Mapping[str, Tensor]) -> DataType | None:
        return STATS_DTYPE if port == "stats" else None

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["x"], dims) if port == "y" else None

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x = graph.tensor("x", (2, 3, 4), strides=(1, 8, 2))
        for t in graph.softmax(x, axes=(1, 2), log=True, generate_stats=True, name="softmax"):
            t.set_output(True)
        return graph.nodes[-1]
