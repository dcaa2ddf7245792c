"""reshape: y holds x's elements in logical row-major order under new dims (cuDNN's LOGICAL reshape).

cuDNN reads the new dims off the output tensor; the builder method takes
them (``dims``) and the wire stores them, so the shape rule can check them
against x. Any dtype; no arithmetic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.ops.base import Op
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class Reshape(Op):
    kind: ClassVar[str] = "reshape"
    table: ClassVar[str] = "ReshapeAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x",)
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    moves_data: ClassVar[bool] = True
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (("x", "uid"), ("y", "uid"), ("dims", "i64[]"))

    x: int
    y: int
    dims: tuple[int, ...]

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        where = f"reshape(x='{x.name}')"
        if not self.dims or min(self.dims) < 1:
            raise GraphError(f"{where}: dims {list(self.dims)} must be one or more positive sizes")
        if math.prod(self.dims) != x.size:
            raise GraphError(
                f"{where}: dims {list(self.dims)} hold {math.prod(self.dims)} elements, "
                f"port 'x' {list(x.dims)} holds {x.size}"
            )
        return {"y": self.dims}

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        graph.reshape(graph.tensor("x", (2, 3, 4)), (4, 6), name="reshape").set_output(True)
        return graph.nodes[-1]
