"""transpose: output axis i is input axis permutation[i] (cuDNN's rule); any dtype, no arithmetic."""

from __future__ import annotations

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
class Transpose(Op):
    kind: ClassVar[str] = "transpose"
    table: ClassVar[str] = "TransposeAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x",)
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    moves_data: ClassVar[bool] = True
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (("x", "uid"), ("y", "uid"), ("permutation", "i64[]"))

    x: int
    y: int
    permutation: tuple[int, ...]

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        if sorted(self.permutation) != list(range(x.rank)):
            raise GraphError(
                f"transpose(x='{x.name}'): permutation {list(self.permutation)} is not a permutation of "
                f"port 'x''s {x.rank} axes"
            )
        return {"y": tuple(x.dims[a] for a in self.permutation)}

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        graph.transpose(graph.tensor("x", (2, 3, 4)), (2, 0, 1), name="transpose").set_output(True)
        return graph.nodes[-1]
