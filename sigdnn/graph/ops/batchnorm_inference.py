"""batchnorm_inference: y = (x - mean) * inv_variance * scale + bias, per channel (cuDNN's order of ports).

x is [N, C, spatial...] in any layout; mean, inv_variance, scale and bias are
[1, C, 1, ...]. Each y element reads only its own x element and its
channel's parameters, so the op is elementwise under broadcasting.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.shapes import packed_in_order_of, per_channel
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node

PARAMETERS = ("mean", "inv_variance", "scale", "bias")


@attrs.frozen
class BatchnormInference(Op):
    kind: ClassVar[str] = "batchnorm_inference"
    table: ClassVar[str] = "BatchnormInferenceAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x", *PARAMETERS)
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = tuple((p, "uid") for p in (*input_ports, *output_ports))

    x: int
    mean: int
    inv_variance: int
    scale: int
    bias: int
    y: int

    def elementwise(self) -> bool:
        return True

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        per_channel(f"batchnorm_inference(x='{x.name}')", "x", x, {p: inputs[p] for p in PARAMETERS})
        return {"y": x.dims}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"batchnorm_inference '{outputs['y'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["x"], dims)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x = graph.tensor("x", (2, 3, 4, 4), layout="NHWC")
        params = [graph.tensor(p, (1, 3, 1, 1)) for p in PARAMETERS]
        graph.batchnorm_inference(x, *params, name="bn_inference").set_output(True)
        return graph.nodes[-1]
