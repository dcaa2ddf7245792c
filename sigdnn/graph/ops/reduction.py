"""reduction: y = one of add, mul, min, max, amax, avg, norm1, norm2, mul_no_zeros over ``axes`` (docs/ops.md).

y has x's dims with a 1 at each reduced axis: cuDNN reads the reduced axes
off the output's dims (the builder method takes them that way) and the wire
stores the axes. Integer dtypes are allowed where the mode has meaning for
them; the compute dtype decides integer or float arithmetic.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.ops.base import Op
from sigdnn.graph.ops.shapes import batch_dims, check_choice
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node

MODES = ("add", "mul", "min", "max", "amax", "avg", "norm1", "norm2", "mul_no_zeros")
LINEAR_MODES = ("add", "avg", "norm1")  # run on |x| they give sum(|terms|) (scaled as the output is)


@attrs.frozen
class Reduction(Op):
    kind: ClassVar[str] = "reduction"
    table: ClassVar[str] = "ReductionAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x",)
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("mode", "enum"),
        ("x", "uid"),
        ("y", "uid"),
        ("axes", "i64[]"),
    )
    enums: ClassVar[dict[str, tuple[str, ...]]] = {"mode": MODES}
    key_attributes: ClassVar[tuple[str, ...]] = ("mode",)

    mode: str
    x: int
    y: int
    axes: tuple[int, ...]

    @property
    def sums_absolute_terms(self) -> bool:  # type: ignore[override]
        return self.mode in LINEAR_MODES

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        return tensors["x"].size // tensors["y"].size

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        where = f"reduction[{self.mode}](x='{x.name}')"
        check_choice(where, "mode", self.mode, MODES)
        if any(not 0 <= a < x.rank for a in self.axes) or list(self.axes) != sorted(set(self.axes)):
            raise GraphError(f"{where}: axes {list(self.axes)} must be distinct, increasing axes of rank {x.rank}")
        return {"y": batch_dims(x, self.axes)}

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x = graph.tensor("x", (2, 3, 4))
        graph.reduction(x, "norm2", (2, 1, 4), name="reduction").set_output(True)
        return graph.nodes[-1]
