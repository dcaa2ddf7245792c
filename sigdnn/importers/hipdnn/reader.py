"""The hipDNN buffer read with sigdnn's bounds-checked FlatBuffers reader: graph, tensors, pass-by-values, nodes.

Each node's attribute table goes to the one mapper registered for it (the
family modules beside this one); ``load`` and ``to_sdg`` are the entry points.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError, SchemaError, SigdnnError
from sigdnn.graph.arguments import scalar_value
from sigdnn.graph.graph import Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.wire_reader import Buffer, Table
from sigdnn.importers.common import UnsupportedOps, refuse_unread_ragged
from sigdnn.importers.hipdnn import attention, conv, matmul, norms, pointwise, reduce_pool  # noqa: F401  (registers every mapper)
from sigdnn.importers.hipdnn.mapping import MAPPERS, NodeMapping
from sigdnn.importers.hipdnn.schema import DATA_TYPE_NAMES, DATA_TYPES, FIELDS, NODE_TABLES, SCHEMA, TENSOR_VALUES

_SCALARS = {
    "uid": ("i64", 0),
    "uid?": ("i64", None),
    "long": ("i64", 0),
    "long?": ("i64", None),
    "f32?": ("f32", None),
    "i32?": ("i32", None),
    "bool": ("bool", False),
    "bool?": ("bool", None),
    "u8": ("u8", 0),
}
_F32 = struct.Struct("<f")
_I32 = struct.Struct("<i")


def _read(buf: Buffer, table: Table, name: str, limits: Limits) -> dict[str, Any]:
    """Every field of ``table`` (a hipDNN ``name`` table) by its published slot; absent fields read as their default."""
    out: dict[str, Any] = {}
    for slot, (field, kind) in enumerate(FIELDS[name]):
        if kind in _SCALARS:
            fmt, default = _SCALARS[kind]
            if fmt in ("f32", "i32"):
                at = table._at(slot)
                if not at:
                    out[field] = default
                    continue
                if at + 4 > buf.size:
                    raise buf.fail(f"field '{field}' at byte {at}")
                out[field] = (_F32 if fmt == "f32" else _I32).unpack_from(buf.data, at)[0]
            else:
                out[field] = table.scalar(slot, fmt, default)
        elif kind == "i64[]":
            out[field] = table.int64s(slot, limits.max_rank if field != "peer_stats" else limits.max_tensors)
        elif kind == "str":
            out[field] = table.string(slot, limits.max_name_length)
        elif kind == "tables":
            out[field] = table.tables(slot)
        elif kind == "offset":
            out[field] = table._target(slot)
        elif kind == "struct":
            out[field] = bool(table._at(slot))
    return out


class HipdnnReader:
    def __init__(self, data: bytes, limits: Limits) -> None:
        if len(data) < 8:
            raise SchemaError(f"buffer of {len(data)} bytes is too short for a hipDNN graph")
        self.buf, self.limits = Buffer(data), limits
        self.unsupported = UnsupportedOps("hipDNN graph", MAPPERS)
        self.ragged: dict[int, int] = {}  # tensor uid -> its ragged offset tensor's uid
        self.placed: set[int] = set()  # ragged tensors a node took the offsets of

    def dtype(self, value: int, where: str) -> DataType | None:
        if value in DATA_TYPES:
            return DATA_TYPES[value]
        name = DATA_TYPE_NAMES.get(value)
        if name:
            raise GraphError(f"{where}: hipDNN data type {name} has no sigdnn data type")
        raise SchemaError(f"{where}: unknown hipDNN data type {value}")

    def run(self) -> Graph:
        root = self.buf.root()
        g = _read(self.buf, root, "Graph", self.limits)
        if g["is_override_shape_enabled"]:
            raise GraphError("hipDNN graph: is_override_shape_enabled (execute-time shapes) is not supported")
        for what, count in (("tensors", len(g["tensors"])), ("nodes", len(g["nodes"]))):
            limit = self.limits.max_tensors if what == "tensors" else self.limits.max_nodes
            if count > limit:
                raise GraphError(f"hipDNN graph declares {count} {what} (limit {limit})")
        graph = Graph(
            g["name"] or "hipdnn",
            self.dtype(g["io_data_type"], "graph io_data_type"),
            self.dtype(g["intermediate_data_type"], "graph intermediate_data_type"),
            self.dtype(g["compute_data_type"], "graph compute_data_type"),
        )
        for i, pos in enumerate(g["tensors"]):
            t = self.tensor(pos, i)
            if t.uid in graph.tensors:
                raise GraphError(f"duplicate tensor uid {t.uid} ('{graph.tensors[t.uid].name}' and '{t.name}')")
            graph.tensors[t.uid] = t
        self.graph = graph
        for i, pos in enumerate(g["nodes"]):
            self.node(pos, i)
        if self.unsupported:
            raise self.unsupported.error()
        refuse_unread_ragged(
            graph, self.ragged, self.placed, ("hipDNN tensor", "has ragged offsets", "sigdnn's sdpa and sdpa_backward")
        )
        return graph

    def tensor(self, pos: int, index: int) -> Tensor:
        where = f"hipDNN tensor #{index}"
        t = _read(self.buf, Table(self.buf, pos), "TensorAttributes", self.limits)
        where = f"hipDNN tensor '{t['name'] or ''}' (uid {t['uid']})"
        dtype = self.dtype(t["data_type"], where)
        if t["ragged_offset_multiplier"] not in (0, 1):
            raise GraphError(
                f"{where}: ragged_offset_multiplier {t['ragged_offset_multiplier']} is not supported "
                "(sigdnn's ragged offsets count elements: multiplier 1)"
            )
        if t["ragged_offset_tensor_uid"] is not None:
            self.ragged[t["uid"]] = t["ragged_offset_tensor_uid"]
        value = None
        if t["value_type"]:
            value = self.value(t["value_type"], t["value"], dtype, where)
        elif t["is_runtime_pass_by_value"]:
            raise GraphError(f"{where}: a runtime pass-by-value tensor without a value is not supported")
        if len(t["dims"]) != len(t["strides"]):
            raise GraphError(f"{where}: {len(t['dims'])} dims but {len(t['strides'])} strides")
        return Tensor(t["uid"], t["name"] or f"tensor_{t['uid']}", t["dims"], t["strides"], dtype, t["virtual"], value)

    def value(self, member: int, at: int, dtype: DataType | None, where: str) -> bytes:
        fmt = TENSOR_VALUES.get(member)
        if fmt is None:
            raise SchemaError(f"{where}: unknown TensorValue member {member}")
        if not at:
            raise SchemaError(f"{where}: TensorValue member {member} without its value")
        if dtype is None:
            raise GraphError(f"{where}: a pass-by-value tensor needs its data type")
        if fmt == "<8":
            if dtype not in (DataType.INT64, DataType.FLOAT64):
                raise GraphError(f"{where}: an 8-byte value for a {dtype} tensor")
            fmt = "<q" if dtype == DataType.INT64 else "<d"
        size = struct.calcsize(fmt)
        if at + size > self.buf.size:
            raise self.buf.fail(f"{where}: value at byte {at}")
        raw = struct.unpack_from(fmt, self.buf.data, at)[0]
        exact = scalar_value(raw, dtype, where) if fmt != "<B" else np.frombuffer(bytes([raw]), dtype.numpy)[0]
        return np.asarray(exact, dtype=dtype.numpy.newbyteorder("<")).tobytes()

    def node(self, pos: int, index: int) -> None:
        where = f"hipDNN node #{index}"
        n = Table(self.buf, pos)
        if len(n.fields) < 4:
            raise SchemaError(
                f"{where}: a Node without compute_data_type: hipDNN's first (hipdnn_sdk) schema, which this reader "
                f"does not read; re-serialize the graph with a current hipDNN ({SCHEMA})"
            )
        fields = _read(self.buf, n, "Node", self.limits)
        name = fields["name"] or f"node_{index}"
        where = f"hipDNN node '{name}'"
        member = fields["attributes_type"]
        if not 1 <= member <= len(NODE_TABLES):
            raise SchemaError(f"{where}: unknown NodeAttributes member {member}")
        table_name = NODE_TABLES[member - 1]
        if table_name not in MAPPERS:
            self.unsupported.add(table_name, name)
            return
        if self.unsupported or not fields["attributes"]:
            if not fields["attributes"]:
                raise SchemaError(f"{where}: {table_name} is missing")
            return
        attrs = _read(self.buf, Table(self.buf, fields["attributes"]), table_name, self.limits)
        compute = self.dtype(fields["compute_data_type"], f"{where} compute_data_type")
        MAPPERS[table_name](NodeMapping(self, name, where, compute, table_name, attrs))


def load(data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS) -> Graph:
    """A hipDNN graph buffer as a checked sigdnn Graph (same tensor uids and names, nodes in order)."""
    from sigdnn.graph.checks import check_graph

    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SchemaError(f"expected hipDNN graph bytes, got {type(data).__name__}")
    try:
        graph = HipdnnReader(bytes(data), limits).run()
    except SigdnnError:
        raise
    except (struct.error, IndexError, ValueError, OverflowError) as e:
        raise SchemaError(f"malformed hipDNN buffer: {type(e).__name__}: {e}") from None
    check_graph(graph, limits)
    return graph


def to_sdg(data: bytes) -> bytes:
    """hipDNN graph bytes -> sigdnn graph bytes (the GraphFormat hook of ``sigdnn.io``)."""
    return load(data).serialize()
