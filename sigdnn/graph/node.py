"""Node: one op application, its attribute table and its compute dtype."""

from __future__ import annotations

import attrs

from sigdnn.dtypes import DataType
from sigdnn.graph.frozen import guard
from sigdnn.graph.ops.base import Op


@attrs.define(eq=False, on_setattr=[guard, attrs.setters.convert, attrs.setters.validate])
class Node:
    name: str
    op: Op
    compute_dtype: DataType | None = None
    frozen: bool = attrs.field(default=False, init=False, eq=False, repr=False)  # its graph is planned

    @property
    def kind(self) -> str:
        return self.op.kind

    def __repr__(self) -> str:
        return f"Node({self.name!r}, {self.op!r})"
