"""Bounds-checked, fast reads of FlatBuffers tables.

The generated Python accessors re-parse the vtable on every field access and
check no bounds, which makes a 10,000-node graph slow to read and a hostile
buffer able to read garbage or slice past the end. This reader parses each
distinct vtable once, checks every offset against the buffer before use, and
reads fields with precompiled structs. Bytes that break the format are a
SchemaError; well-formed data over a limit (a name too long, a rank too
high) is a GraphError, as every exceeded limit is. Slot numbers come from the generated
builder functions (see ``slots_of``), so the schema stays the one source.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

from sigdnn.errors import GraphError, SchemaError

_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_VT_HEAD = struct.Struct("<HH")
SCALARS = {
    "i8": struct.Struct("<b"),
    "u8": struct.Struct("<B"),
    "u16": struct.Struct("<H"),
    "i16": struct.Struct("<h"),
    "i64": struct.Struct("<q"),
    "f64": struct.Struct("<d"),
    "bool": struct.Struct("<?"),
}


class _SlotProbe:
    """A stand-in builder that records the slot a generated Add* function writes."""

    slot: int = -1

    def __getattr__(self, name: str) -> Any:
        def record(slot: int, *args: Any) -> None:
            self.slot = slot

        return record


@cache
def slots_of(module: Any) -> dict[str, int]:
    """Field name (CamelCase, as in ``AddIn0``) -> vtable slot, read off generated code."""
    slots = {}
    for name in dir(module):
        if name.startswith("Add") and not name.startswith("Add_"):
            probe = _SlotProbe()
            getattr(module, name)(probe, 0)
            if probe.slot >= 0:
                slots[name[3:]] = probe.slot
    return slots


class Buffer:
    """The bytes being read, plus a cache of parsed vtables."""

    __slots__ = ("data", "size", "vtables")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.size = len(data)
        self.vtables: dict[int, tuple[int, tuple[int, ...]]] = {}

    def fail(self, what: str) -> SchemaError:
        return SchemaError(f"{what} lies outside the {self.size}-byte buffer")

    def u32(self, at: int) -> int:
        if not 0 <= at <= self.size - 4:
            raise self.fail(f"offset at byte {at}")
        return _U32.unpack_from(self.data, at)[0]

    def root(self) -> Table:
        return Table(self, self.u32(0))

    def vtable(self, pos: int) -> tuple[int, tuple[int, ...]]:
        if not 0 <= pos <= self.size - 4:
            raise self.fail(f"table at byte {pos}")
        vt = pos - _I32.unpack_from(self.data, pos)[0]
        cached = self.vtables.get(vt)
        if cached is not None:
            return cached
        if not 0 <= vt <= self.size - 4:
            raise self.fail(f"vtable at byte {vt}")
        vt_size, table_size = _VT_HEAD.unpack_from(self.data, vt)
        if vt_size < 4 or vt_size % 2 or vt + vt_size > self.size:
            raise SchemaError(f"vtable at byte {vt} has a bad size {vt_size}")
        fields = struct.unpack_from(f"<{(vt_size - 4) // 2}H", self.data, vt + 4)
        if any(f and f + 1 > table_size for f in fields):
            raise SchemaError(f"vtable at byte {vt} points past its {table_size}-byte table")
        self.vtables[vt] = (table_size, fields)
        return table_size, fields


class Table:
    """One table: fields by slot, each read checked against the buffer."""

    __slots__ = ("buf", "fields", "pos")

    def __init__(self, buf: Buffer, pos: int) -> None:
        table_size, fields = buf.vtable(pos)
        if pos + table_size > buf.size:
            raise buf.fail(f"table at byte {pos} ({table_size} bytes)")
        self.buf, self.pos, self.fields = buf, pos, fields

    def _at(self, slot: int) -> int:
        """Absolute position of a field, 0 when absent."""
        off = self.fields[slot] if slot < len(self.fields) else 0
        return self.pos + off if off else 0

    def scalar(self, slot: int, kind: str, default: Any = None) -> Any:
        at = self._at(slot)
        if not at:
            return default
        fmt = SCALARS[kind]
        if at + fmt.size > self.buf.size:
            raise self.buf.fail(f"field at byte {at}")
        return fmt.unpack_from(self.buf.data, at)[0]

    def _target(self, slot: int) -> int:
        at = self._at(slot)
        return at + self.buf.u32(at) if at else 0

    def _vector(self, slot: int, elem: int) -> tuple[int, int]:
        """(start, length) of a vector field; (0, 0) when absent."""
        target = self._target(slot)
        if not target:
            return 0, 0
        n = self.buf.u32(target)
        if target + 4 + n * elem > self.buf.size:
            raise self.buf.fail(f"vector of {n} x {elem} bytes at byte {target}")
        return target + 4, n

    def string(self, slot: int, max_length: int) -> str | None:
        start, n = self._vector(slot, 1)
        if not start:
            return None
        if n > max_length:
            raise GraphError(f"string of {n} bytes (max {max_length})")
        try:
            return self.buf.data[start : start + n].decode("utf-8")
        except UnicodeDecodeError:
            raise SchemaError(f"string at byte {start} is not UTF-8") from None

    def vector_length(self, slot: int, elem: int) -> int:
        return self._vector(slot, elem)[1]

    def int64s(self, slot: int, max_length: int) -> tuple[int, ...]:
        start, n = self._vector(slot, 8)
        if n > max_length:
            raise GraphError(f"int vector of {n} entries (max {max_length})")
        return struct.unpack_from(f"<{n}q", self.buf.data, start) if n else ()

    def float64s(self, slot: int, max_length: int) -> tuple[float, ...]:
        start, n = self._vector(slot, 8)
        if n > max_length:
            raise GraphError(f"float vector of {n} entries (max {max_length})")
        return struct.unpack_from(f"<{n}d", self.buf.data, start) if n else ()

    def raw_bytes(self, slot: int, max_length: int) -> bytes | None:
        start, n = self._vector(slot, 1)
        if not start:
            return None
        if n > max_length:
            raise GraphError(f"byte vector of {n} entries (max {max_length})")
        return bytes(self.buf.data[start : start + n])

    def table_at(self, slot: int) -> Table | None:
        target = self._target(slot)
        return Table(self.buf, target) if target else None

    def tables(self, slot: int) -> list[int]:
        """Positions of the tables a vector-of-tables field points to."""
        start, n = self._vector(slot, 4)
        if not n:
            return []
        offsets = struct.unpack_from(f"<{n}I", self.buf.data, start)
        return [start + 4 * i + off for i, off in enumerate(offsets)]
