"""batchnorm (training): per-channel statistics over N and every spatial position (docs/ops.md).

Ports as cuDNN's: x, scale, bias, and optionally in_running_mean with
in_running_var -> y, mean, inv_variance, and next_running_mean /
next_running_var exactly when running statistics come in. epsilon and
momentum are attribute values (cuDNN's pass-by-value scalars; the builder
method reads such a tensor's value); momentum is present exactly when the
running statistics are.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.shapes import (
    STATS_DTYPE,
    channel_dims,
    packed_in_order_of,
    per_channel,
    require_fraction,
    require_positive,
)
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node

RUNNING = ("in_running_mean", "in_running_var")


@attrs.frozen
class Batchnorm(Op):
    kind: ClassVar[str] = "batchnorm"
    table: ClassVar[str] = "BatchnormAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x", "scale", "bias", *RUNNING)
    output_ports: ClassVar[tuple[str, ...]] = ("y", "mean", "inv_variance", "next_running_mean", "next_running_var")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("x", "uid"),
        ("scale", "uid"),
        ("bias", "uid"),
        ("in_running_mean", "uid?"),
        ("in_running_var", "uid?"),
        ("y", "uid"),
        ("mean", "uid"),
        ("inv_variance", "uid"),
        ("next_running_mean", "uid?"),
        ("next_running_var", "uid?"),
        ("epsilon", "f64"),
        ("momentum", "f64?"),
    )

    x: int
    scale: int
    bias: int
    y: int
    mean: int
    inv_variance: int
    epsilon: float
    in_running_mean: int | None = None
    in_running_var: int | None = None
    next_running_mean: int | None = None
    next_running_var: int | None = None
    momentum: float | None = None

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """Every output depends on its channel's statistics over N x spatial elements."""
        x = tensors["x"]
        return x.dims[0] * math.prod(x.dims[2:])

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        where = f"batchnorm(x='{x.name}')"
        require_positive(where, "epsilon", self.epsilon)
        running = [p for p in RUNNING if p in inputs]
        if len(running) == 1:
            raise GraphError(f"{where}: port '{running[0]}' is given without its pair; give both {list(RUNNING)}")
        if running and self.momentum is None:
            raise GraphError(f"{where}: running statistics need a momentum")
        if not running and self.momentum is not None:
            raise GraphError(f"{where}: momentum {self.momentum} is given without running statistics")
        if self.momentum is not None:
            require_fraction(where, "momentum", self.momentum)
        per_channel(where, "x", x, {p: inputs[p] for p in ("scale", "bias", *running)})
        stats = channel_dims(x)
        dims = {"y": x.dims, "mean": stats, "inv_variance": stats}
        if running:
            dims.update(next_running_mean=stats, next_running_var=stats)
        return dims

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"batchnorm '{outputs['y'].name}'", {**inputs, **outputs})

    def output_dtype(self, port: str, inputs: Mapping[str, Tensor]) -> DataType | None:
        """Statistics in float32, running ones in their input's dtype; y takes the graph default."""
        if port.startswith("next_"):
            return inputs[port.replace("next_", "in_")].dtype or STATS_DTYPE
        return STATS_DTYPE if port in ("mean", "inv_variance") else None

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["x"], dims) if port == "y" else None

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x = graph.tensor("x", (2, 3, 4, 4), layout="NHWC")
        scale, bias, mean, var = (
            graph.tensor(p, (1, 3, 1, 1)) for p in ("scale", "bias", "running_mean", "running_var")
        )
        for t in graph.batchnorm(x, scale, bias, mean, var, 1e-5, 0.1, name="bn"):
            t.set_output(True)
        return graph.nodes[-1]
