"""rmsnorm: y = x * inv_variance * scale (+ bias), inv_variance = 1/sqrt(mean(x^2) + epsilon) (docs/ops.md).

Normalized axes come from the scale's dims as in layernorm; bias is
optional and shares the scale's dims. The training phase also writes
inv_variance (a 1 in every normalized dim). epsilon is an attribute value
(see batchnorm).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.dtypes import DataType
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.layernorm import PHASES
from sigdnn.graph.ops.shapes import (
    STATS_DTYPE,
    batch_dims,
    check_choice,
    normalized_axes,
    packed_in_order_of,
    require_positive,
    same_dims,
)
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class Rmsnorm(Op):
    kind: ClassVar[str] = "rmsnorm"
    table: ClassVar[str] = "RmsnormAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x", "scale", "bias")
    output_ports: ClassVar[tuple[str, ...]] = ("y", "inv_variance")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("phase", "enum"),
        ("x", "uid"),
        ("scale", "uid"),
        ("bias", "uid?"),
        ("y", "uid"),
        ("inv_variance", "uid?"),
        ("epsilon", "f64"),
    )
    enums: ClassVar[dict[str, tuple[str, ...]]] = {"phase": PHASES}
    enum_types: ClassVar[dict[str, str]] = {"phase": "NormPhase"}
    key_attributes: ClassVar[tuple[str, ...]] = ("phase",)

    phase: str
    x: int
    scale: int
    y: int
    epsilon: float
    bias: int | None = None
    inv_variance: int | None = None

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        return math.prod(tensors["scale"].dims)

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x, scale = inputs["x"], inputs["scale"]
        where = f"rmsnorm(x='{x.name}')"
        check_choice(where, "phase", self.phase, PHASES)
        require_positive(where, "epsilon", self.epsilon)
        axes = normalized_axes(where, "x", x, "scale", scale)
        if "bias" in inputs:
            same_dims(where, {"scale": scale, "bias": inputs["bias"]})
        if self.phase == "inference":
            return {"y": x.dims}
        return {"y": x.dims, "inv_variance": batch_dims(x, axes)}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"rmsnorm '{outputs['y'].name}'", {**inputs, **outputs})

    def output_dtype(self, port: str, inputs: Mapping[str, Tensor]) -> DataType | None:
        return None if port == "y" else STATS_DTYPE

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["x"], dims) if port == "y" else None

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x, scale, bias = graph.tensor("x", (2, 3, 8)), graph.tensor("scale", (1, 1, 8)), graph.tensor("bias", (1, 1, 8))
        for t in graph.rmsnorm("training", x, scale, bias, epsilon=1e-5, name="rmsnorm"):
            t.set_output(True)
        return graph.nodes[-1]
