"""batchnorm_backward: dx, dscale, dbias from dy, x, scale and the saved mean / inv_variance (docs/ops.md).

dy and x are [N, C, spatial...]; scale, mean, inv_variance, dscale and dbias
are [1, C, 1, ...].
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.shapes import channel_dims, packed_in_order_of, per_channel, same_dims
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class BatchnormBackward(Op):
    kind: ClassVar[str] = "batchnorm_backward"
    table: ClassVar[str] = "BatchnormBackwardAttributes"
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
        """dscale and dbias sum N x spatial terms per channel; dx depends on those sums."""
        x = tensors["x"]
        return x.dims[0] * math.prod(x.dims[2:])

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        where = f"batchnorm_backward(x='{x.name}')"
        same_dims(where, {"x": x, "dy": inputs["dy"]})
        per_channel(where, "x", x, {p: inputs[p] for p in ("scale", "mean", "inv_variance")})
        stats = channel_dims(x)
        return {"dx": x.dims, "dscale": stats, "dbias": stats}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"batchnorm_backward '{outputs['dx'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["dy"], dims) if port == "dx" else None

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        dy, x = graph.tensor("dy", (2, 3, 4, 4)), graph.tensor("x", (2, 3, 4, 4), layout="NHWC")
        params = [graph.tensor(p, (1, 3, 1, 1)) for p in ("scale", "mean", "inv_variance")]
        for t in graph.batchnorm_backward(dy, x, *params, name="bn_backward"):
            t.set_output(True)
        return graph.nodes[-1]
