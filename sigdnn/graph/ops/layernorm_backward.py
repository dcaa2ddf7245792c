"""layernorm_backward: dx, dscale, dbias from dy, x, scale and the saved mean / inv_variance.

Normalized axes come from the scale's dims as in layernorm; mean and
inv_variance have a 1 in every normalized dim; dscale and dbias take the
scale's dims.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.shapes import batch_dims, normalized_axes, packed_in_order_of, require_dims, same_dims
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class LayernormBackward(Op):
    kind: ClassVar[str] = "layernorm_backward"
    table: ClassVar[str] = "LayernormBackwardAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("dy", "x", "scale", "mean", "inv_variance")
    output_ports: ClassVar[tuple[str, ...]] = ("dx", "dscale", "dbias")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = tuple((p, "uid") for p in (*input_ports, *output_ports))

    dy: int
    x: int
    scale: int
    mean: int
    inv_variance: int
    dx: int
    dscale: int
    dbias: int

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """dx sums over its normalized slice; dscale and dbias over the batch entries."""
        normalized = math.prod(tensors["scale"].dims)
        return normalized if port == "dx" else tensors["x"].size // normalized

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x, scale = inputs["x"], inputs["scale"]
        where = f"layernorm_backward(x='{x.name}')"
        same_dims(where, {"x": x, "dy": inputs["dy"]})
        stats = batch_dims(x, normalized_axes(where, "x", x, "scale", scale))
        for port in ("mean", "inv_variance"):
            require_dims(where, port, inputs[port], stats, "one statistic per batch entry")
        return {"dx": x.dims, "dscale": scale.dims, "dbias": scale.dims}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"layernorm_backward '{outputs['dx'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["dy"], dims) if port == "dx" else None

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        dy, x, scale = graph.tensor("dy", (2, 3, 8)), graph.tensor("x", (2, 3, 8)), graph.tensor("scale", (1, 1, 8))
        mean, inv = graph.tensor("mean", (2, 3, 1)), graph.tensor("inv_variance", (2, 3, 1))
        for t in graph.layernorm_backward(dy, x, scale, mean, inv, name="layernorm_backward"):
            t.set_output(True)
        return graph.nodes[-1]
