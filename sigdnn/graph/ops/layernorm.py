"""layernorm: y = (x - mean) * inv_variance * scale + bias over the axes the scale spans (docs/ops.md).

The normalized axes are those where the scale's dim equals x's, as cuDNN
gives them; the others are batch dims. scale and bias share dims. In the
training phase the node also writes mean and inv_variance (a 1 in every
normalized dim); in the inference phase it writes y only. epsilon is an
attribute value (see batchnorm).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.dtypes import DataType
from sigdnn.graph.ops.base import Op, require_float
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

PHASES = ("training", "inference")


@attrs.frozen
class Layernorm(Op):
    kind: ClassVar[str] = "layernorm"
    table: ClassVar[str] = "LayernormAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x", "scale", "bias")
    output_ports: ClassVar[tuple[str, ...]] = ("y", "mean", "inv_variance")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("phase", "enum"),
        ("x", "uid"),
        ("scale", "uid"),
        ("bias", "uid"),
        ("y", "uid"),
        ("mean", "uid?"),
        ("inv_variance", "uid?"),
        ("epsilon", "f64"),
    )
    enums: ClassVar[dict[str, tuple[str, ...]]] = {"phase": PHASES}
    enum_types: ClassVar[dict[str, str]] = {"phase": "NormPhase"}
    key_attributes: ClassVar[tuple[str, ...]] = ("phase",)

    phase: str
    x: int
    scale: int
    bias: int
    y: int
    epsilon: float
    mean: int | None = None
    inv_variance: int | None = None

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """Each statistic (and so each y) takes every element of its normalized slice."""
        return math.prod(tensors["scale"].dims)

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x, scale = inputs["x"], inputs["scale"]
        where = f"layernorm(x='{x.name}')"
        check_choice(where, "phase", self.phase, PHASES)
        require_positive(where, "epsilon", self.epsilon)
        axes = normalized_axes(where, "x", x, "scale", scale)
        same_dims(where, {"scale": scale, "bias": inputs["bias"]})
        if self.phase == "inference":
            return {"y": x.dims}
        stats = batch_dims(x, axes)
        return {"y": x.dims, "mean": stats, "inv_variance": stats}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"layernorm '{outputs['y'].name}'", {**inputs, **outputs})

    def output_dtype(self, port: str, inputs: Mapping[str, Tensor]) -> DataType | None:
        return None if port == "y" else STATS_DTYPE

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["x"], dims) if port == "y" else None

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x, scale, bias = graph.tensor("x", (2, 3, 8)), graph.tensor("scale", (1, 1, 8)), graph.tensor("bias", (1, 1, 8))
        for t in graph.layernorm("training", x, scale, bias, epsilon=1e-5, name="layernorm"):
            t.set_output(True)
        return graph.nodes[-1]
