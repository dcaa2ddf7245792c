"""Typed access to the values of cuDNN graph JSON; a value of the wrong shape is a SchemaError naming where."""

from __future__ import annotations

import struct
from typing import Any

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError, SchemaError
from sigdnn.graph.arguments import integer

DATA_TYPES: dict[str | None, DataType | None] = {
    None: None,
    "FLOAT": DataType.FLOAT32,
    "DOUBLE": DataType.FLOAT64,
    "HALF": DataType.FLOAT16,
    "BFLOAT16": DataType.BFLOAT16,
    "INT8": DataType.INT8,
    "UINT8": DataType.UINT8,
    "INT32": DataType.INT32,
    "INT64": DataType.INT64,
    "BOOLEAN": DataType.BOOL,
    "BYTE_BOOLEAN": DataType.BOOL,
    "FP8_E4M3": DataType.FP8_E4M3,
    "FP8_E5M2": DataType.FP8_E5M2,
}
_F32 = struct.Struct("<f")


class Reader:
    """Typed access to JSON values; anything of the wrong shape is a SchemaError naming where it was."""

    @staticmethod
    def obj(v: Any, where: str) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise SchemaError(f"{where}: expected a JSON object, got {type(v).__name__}")
        return v

    @staticmethod
    def array(v: Any, where: str) -> list[Any]:
        if not isinstance(v, list):
            raise SchemaError(f"{where}: expected a JSON array, got {type(v).__name__}")
        return v

    @staticmethod
    def text(v: Any, where: str, optional: bool = True) -> str | None:
        if v is None and optional:
            return None
        if not isinstance(v, str):
            raise SchemaError(f"{where}: expected a string, got {type(v).__name__}")
        return v

    @staticmethod
    def boolean(v: Any, where: str, default: bool = False) -> bool:
        if v is None:
            return default
        if not isinstance(v, bool):
            raise SchemaError(f"{where}: expected true or false, got {v!r}")
        return v

    @staticmethod
    def int_(v: Any, where: str) -> int:
        if isinstance(v, bool) or not isinstance(v, int):
            raise SchemaError(f"{where}: expected an integer, got {v!r}")
        return integer(v, where)

    @classmethod
    def ints(cls, v: Any, where: str, limit: int) -> tuple[int, ...]:
        items = cls.array(v, where)
        if len(items) > limit:
            raise GraphError(f"{where}: {len(items)} entries (limit {limit})")
        return tuple(cls.int_(x, where) for x in items)

    @staticmethod
    def real(v: Any, where: str) -> float | None:
        """A float as the frontend writes one: the 8 hex digits of its float32 bits, or a JSON number."""
        if v is None:
            return None
        if isinstance(v, str):
            if len(v) != 8 or any(c not in "0123456789abcdefABCDEF" for c in v):
                raise SchemaError(f"{where}: {v!r} is not the 8 hex digits of a float32")
            return _F32.unpack(struct.pack("<I", int(v, 16)))[0]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise SchemaError(f"{where}: expected a number, got {v!r}")
        return float(v)


R = Reader


def data_type(v: Any, where: str) -> DataType | None:
    """A cuDNN data type name as a sigdnn DataType (None for an unset one)."""
    name = R.text(v, where)
    if name not in DATA_TYPES:
        raise GraphError(f"{where}: cuDNN data type {name!r} has no sigdnn data type")
    return DATA_TYPES[name]
