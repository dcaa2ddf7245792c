"""slice: per axis, the elements start, start + stride, ... below limit (a Python slice, normalized).

On the wire: start_indices, limit_indices, strides (XLA's names; "start"
would collide with the generated table's Start function).

The builder method takes Python slices as cuDNN's does and stores them
normalized: 0 <= start < limit <= dim and stride >= 1 on every axis, so the
result is never empty. Any dtype; no arithmetic.
"""

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
class Slice(Op):
    kind: ClassVar[str] = "slice"
    table: ClassVar[str] = "SliceAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x",)
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    moves_data: ClassVar[bool] = True
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("x", "uid"),
        ("y", "uid"),
        ("start_indices", "i64[]"),
        ("limit_indices", "i64[]"),
        ("strides", "i64[]"),
    )

    x: int
    y: int
    start_indices: tuple[int, ...]
    limit_indices: tuple[int, ...]
    strides: tuple[int, ...]

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        where = f"slice(x='{x.name}')"
        for name in ("start_indices", "limit_indices", "strides"):
            if len(getattr(self, name)) != x.rank:
                raise GraphError(
                    f"{where}: {name} has {len(getattr(self, name))} entries for port 'x' of rank {x.rank}"
                )
        dims = []
        for axis, (a, b, s, d) in enumerate(zip(self.start_indices, self.limit_indices, self.strides, x.dims)):
            if s < 1:
                raise GraphError(f"{where}: axis {axis}: stride {s} must be >= 1")
            if not 0 <= a < b <= d:
                raise GraphError(
                    f"{where}: axis {axis}: slice [{a}:{b}] is out of range or empty for port 'x''s dim {d}"
                )
            dims.append(-(-(b - a) // s))
        return {"y": tuple(dims)}

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x = graph.tensor("x", (4, 5, 6))
        graph.slice(x, [slice(1, 4), slice(None, None, 2)], name="slice").set_output(True)
        return graph.nodes[-1]
