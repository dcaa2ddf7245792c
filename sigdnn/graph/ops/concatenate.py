"""concatenate: y joins the inputs along ``axis`` (cuDNN's concatenate); any dtype, no arithmetic.

The inputs are one vector port: field ``x`` holds their uids in order, and
they are the ports ``x_0``, ``x_1``, ... Every input has y's rank and y's
dims except along ``axis``, where y's dim is their sum.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.ops.base import Op
from sigdnn.graph.ops.shapes import described
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class Concatenate(Op):
    kind: ClassVar[str] = "concatenate"
    table: ClassVar[str] = "ConcatenateAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x",)
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    moves_data: ClassVar[bool] = True
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (("x", "uid[]"), ("y", "uid"), ("axis", "i64"))

    x: tuple[int, ...]
    y: int
    axis: int

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        if not inputs:
            raise GraphError("concatenate: needs at least one input (port x_0)")
        (first, ref), *rest = inputs.items()
        where = f"concatenate(x_0='{ref.name}')"
        if not 0 <= self.axis < ref.rank:
            raise GraphError(f"{where}: axis {self.axis} out of range for rank {ref.rank}")
        total = ref.dims[self.axis]
        for port, t in rest:
            others = [d for i, d in enumerate(t.dims) if i != self.axis]
            if t.rank != ref.rank or others != [d for i, d in enumerate(ref.dims) if i != self.axis]:
                raise GraphError(
                    f"{where}: {described(port, t)} has dims {list(t.dims)}, {described(first, ref)} has "
                    f"{list(ref.dims)}; all dims but axis {self.axis} must match"
                )
            total += t.dims[self.axis]
        return {"y": (*ref.dims[: self.axis], total, *ref.dims[self.axis + 1 :])}

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        a, b = graph.tensor("a", (2, 3)), graph.tensor("b", (2, 2))
        graph.concatenate([a, b, a], axis=1, name="concatenate").set_output(True)
        return graph.nodes[-1]
