"""Op: the small base class every op's attribute table derives from.

An op module declares its ports, its wire fields and its shape rule in one
place; this base turns the declarations into FlatBuffers reads and writes so
that adding an op is one table in schemas/, one module here, a key and a
builder.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs
import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError
from sigdnn.graph.limits import Limits
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.wire_reader import Table, slots_of

# Wire field kinds: "uid" (required port), "uid?" (optional port),
# "f64?" / "i64?" (optional scalars), "i64[]" (int vector).
WireFields = tuple[tuple[str, str], ...]


def camel(name: str) -> str:
    """flatc's accessor name for a snake_case field (``in_0`` -> ``In0``)."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


@attrs.frozen
class Op:
    """Attributes of one node: port uids plus op parameters."""

    kind: ClassVar[str]
    table: ClassVar[str]  # generated table module under sigdnn.schemas
    input_ports: ClassVar[tuple[str, ...]]
    output_ports: ClassVar[tuple[str, ...]]
    wire_fields: ClassVar[WireFields]

    # -- ports ---------------------------------------------------------------
    def inputs(self) -> dict[str, int]:
        """Input port -> uid, present ports only, in port order."""
        return {p: getattr(self, p) for p in self.input_ports if getattr(self, p) is not None}

    def outputs(self) -> dict[str, int]:
        return {p: getattr(self, p) for p in self.output_ports}

    def ports(self) -> dict[str, int]:
        return {**self.inputs(), **self.outputs()}

    # -- rules ---------------------------------------------------------------
    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        """Output port -> dims for the given inputs; GraphError if they don't fit."""
        raise NotImplementedError

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        """Extra rules beyond dims (dtypes, attribute ranges); GraphError on failure."""

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """Memory a node needs beyond its tensors, where attributes (not dims) can make it huge.

        Checked against the limits before anything is allocated; GraphError
        when the op's own cost limit is exceeded.
        """
        return 0

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """Strides for a new output; None means packed row-major."""
        return None

    # -- wire ----------------------------------------------------------------
    @classmethod
    def _module(cls) -> Any:
        return importlib.import_module(f"sigdnn.schemas.{cls.table}")

    def wire_value(self, field: str) -> Any:
        """The value to write for ``field``; subclasses map enums here."""
        return getattr(self, field)

    @classmethod
    def from_wire_value(cls, field: str, value: Any, where: str) -> Any:
        return value

    def to_fb(self, builder: Any) -> int:
        """Write this table; returns its offset."""
        mod = self._module()
        vectors = {}
        for field, kind in self.wire_fields:
            if kind == "i64[]":
                vectors[field] = builder.CreateNumpyVector(np.asarray(getattr(self, field), dtype="<i8"))
        mod.Start(builder)
        for field, _kind in self.wire_fields:
            value = vectors.get(field, self.wire_value(field))
            if value is not None:
                getattr(mod, "Add" + camel(field))(builder, value)
        return mod.End(builder)

    @classmethod
    def from_fb(cls, table: Table, where: str, max_rank: int) -> Op:
        """Read the attribute table; SchemaError names ``where``."""
        slots = slots_of(cls._module())
        values: dict[str, Any] = {}
        for field, kind in cls.wire_fields:
            slot = slots[camel(field)]
            if kind == "i64[]":
                values[field] = table.int64s(slot, max_rank)
            elif kind == "mode":
                values[field] = cls.from_wire_value(field, table.scalar(slot, "i16", 0), where)
            elif kind == "f64?":
                values[field] = table.scalar(slot, "f64")
            else:
                values[field] = table.scalar(slot, "i64", 0 if kind == "uid" else None)
        return cls(**values)


def broadcast_dims(shapes: Sequence[Sequence[int]], where: str) -> tuple[int, ...]:
    """NumPy broadcasting of dims (right-aligned; a dim of 1 stretches)."""
    rank = max(len(s) for s in shapes)
    out = []
    for axis in range(rank):
        sizes = {s[axis - rank + len(s)] for s in shapes if axis - rank + len(s) >= 0}
        sizes.discard(1)
        if len(sizes) > 1:
            raise GraphError(f"{where}: dims {[list(s) for s in shapes]} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def require_float(where: str, tensors: Mapping[str, Tensor]) -> None:
    for port, t in tensors.items():
        if t.dtype is not None and not t.dtype.is_float:
            raise GraphError(f"{where}: port '{port}' (tensor '{t.name}') must be floating point, is {t.dtype}")


__all__ = ["DataType", "Op", "WireFields", "broadcast_dims", "camel", "require_float"]
