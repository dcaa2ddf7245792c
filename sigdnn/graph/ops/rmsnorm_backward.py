"""rmsnorm_backward: dx, dscale and (with has_dbias) dbias from dy, x, scale and the saved inv_variance.

Normalized axes come from the scale's dims as in rmsnorm; dscale and dbias
take the scale's dims. has_dbias is cuDNN's attribute; the dbias output
exists exactly when it is set.
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
class RmsnormBackward(Op):
    kind: ClassVar[str] = "rmsnorm_backward"
    table: ClassVar[str] = "RmsnormBackwardAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("dy", "x", "scale", "inv_variance")
    output_ports: ClassVar[tuple[str, ...]] = ("dx", "dscale", "dbias")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        *((p, "uid") for p in (*input_ports, "dx", "dscale")),
        ("dbias", "uid?"),
        ("has_dbias", "bool"),
    )

    dy: int
    x: int
    scale: int
    inv_variance: int
    dx: int
    dscale: int
    dbias: int | None = None
    has_dbias: bool = False

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        normalized = math.prod(tensors["scale"].dims)
        return normalized if port == "dx" else tensors["x"].size // normalized

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x, scale = inputs["x"], inputs["scale"]
        where = f"rmsnorm_backward(x='{x.name}')"
        same_dims(where, {"x": x, "dy": inputs["dy"]})
        stats = batch_dims(x, normalized_axes(where, "x", x, "scale", scale))
        require_dims(where, "inv_variance", inputs["inv_variance"], stats, "one statistic per batch entry")
        dims = {"dx": x.dims, "dscale": scale.dims}
        if self.has_dbias:
            dims["dbias"] = scale.dims
        return dims

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"rmsnorm_backward '{outputs['dx'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["dy"], dims) if port == "dx" else None

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        dy, x, scale = graph.tensor("dy", (2, 3, 8)), graph.tensor("x", (2, 3, 8)), graph.tensor("scale", (1, 1, 8))
        inv = graph.tensor("inv_variance", (2, 3, 1))
        for t in graph.rmsnorm_backward(dy, x, scale, inv, has_dbias=True, name="rmsnorm_backward"):
            t.set_output(True)
        return graph.nodes[-1]
