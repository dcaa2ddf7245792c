"""Matmul: c = a @ b over the last two dims, batch dims broadcast."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.ops.base import Op, broadcast_dims
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class Matmul(Op):
    kind: ClassVar[str] = "matmul"
    table: ClassVar[str] = "MatmulAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("a", "b")
    output_ports: ClassVar[tuple[str, ...]] = ("c",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (("a", "uid"), ("b", "uid"), ("c", "uid"))

    a: int
    b: int
    c: int

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        graph.matmul(graph.tensor("a", (2, 3, 4)), graph.tensor("b", (4, 5)), name="matmul").set_output(True)
        return graph.nodes[-1]

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        a, b = inputs["a"], inputs["b"]
        if a.rank < 2 or b.rank < 2:
            raise GraphError(f"matmul: a '{a.name}' and b '{b.name}' need rank >= 2, have {a.rank} and {b.rank}")
        (m, k), (k2, n) = a.dims[-2:], b.dims[-2:]
        if k != k2:
            raise GraphError(
                f"matmul: a '{a.name}' {list(a.dims)} and b '{b.name}' {list(b.dims)} disagree on K ({k} != {k2})"
            )
        batch = broadcast_dims([a.dims[:-2], b.dims[:-2]], f"matmul batch dims of '{a.name}' and '{b.name}'")
        return {"c": (*batch, m, n)}

    sums_absolute_terms: ClassVar[bool] = True
    dot_products: ClassVar[bool] = True

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        return tensors["a"].dims[-1]

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """Multiply-adds: every element of c takes K of them."""
        return tensors["c"].size * tensors["a"].dims[-1]
