"""FlatBuffers bytes -> Graph, treating every buffer as hostile.

The generated accessors do no bounds checks, so we (1) check the identifier
and major version first, (2) read through a bytes type whose slices refuse to
run past the end (flatbuffers reads strings by slicing and would otherwise
truncate silently), (3) check every count against Limits before iterating,
and (4) turn any low-level read failure into a SchemaError that says which
tensor or node was being read.
"""

from __future__ import annotations

import struct
from typing import Any

from sigdnn.dtypes import DataType, from_wire
from sigdnn.errors import GraphError, SchemaError
from sigdnn.graph.graph import SCHEMA_VERSION, Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.graph.node import Node
from sigdnn.graph.ops import BY_WIRE
from sigdnn.graph.serialize import FILE_IDENTIFIER
from sigdnn.graph.tensor import Tensor
from sigdnn.schemas.Graph import Graph as FbGraph

_READ_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, UnicodeDecodeError, AttributeError)


class _StrictBytes(bytes):
    """bytes whose slices must lie inside the buffer (flatbuffers strings)."""

    __slots__ = ()

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice) and (key.start is None or key.start < 0 or key.stop is None or key.stop > len(self)):
            raise SchemaError(f"string or vector runs past the end of the {len(self)}-byte buffer")
        return super().__getitem__(key)


def _dtype(value: int, where: str) -> DataType | None:
    try:
        return from_wire(value)
    except KeyError:
        raise SchemaError(f"{where}: unknown data type {value}") from None


def _name(raw: bytes | None, where: str, limits: Limits) -> str:
    if raw is None:
        return ""
    if len(raw) > limits.max_name_length:
        raise SchemaError(f"{where}: name is {len(raw)} bytes (max {limits.max_name_length})")
    return raw.decode("utf-8")


def _count(n: int, limit: int, elem_bytes: int, buf_len: int, what: str) -> int:
    if n > limit:
        raise GraphError(f"graph declares {n} {what} (limit {limit})")
    if n * elem_bytes > buf_len:
        raise SchemaError(f"{what} vector of {n} entries cannot fit in a {buf_len}-byte buffer")
    return n


def _int_vector(fb: Any, field: str, where: str, limits: Limits) -> tuple[int, ...]:
    n = getattr(fb, field + "Length")()
    if n > limits.max_rank:
        raise GraphError(f"{where}: {n} {field.lower()} (max rank {limits.max_rank})")
    return tuple(getattr(fb, field + "AsNumpy")().tolist()) if n else ()


def _tensor(fb: Any, index: int, limits: Limits) -> Tensor:
    where = f"tensor #{index}"
    uid = fb.Uid()
    where = f"tensor #{index} (uid {uid})"
    name = _name(fb.Name(), where, limits)
    where = f"tensor '{name}' (uid {uid})"
    dtype = _dtype(fb.DataType(), where)
    dims = _int_vector(fb, "Dims", where, limits)
    strides = _int_vector(fb, "Strides", where, limits)
    value = None
    if fb.IsPassByValue():
        n = fb.ValueLength()
        if n > limits.max_scalar_bytes:
            raise SchemaError(f"{where}: pass-by-value value is {n} bytes (max {limits.max_scalar_bytes})")
        value = fb.ValueAsNumpy().tobytes() if n else b""
    return Tensor(uid, name, dims, strides, dtype, bool(fb.IsVirtual()), value)


def _node(fb: Any, index: int, limits: Limits) -> Node:
    where = f"node #{index}"
    name = _name(fb.Name(), where, limits)
    where = f"node '{name}'"
    compute = _dtype(fb.ComputeDataType(), where)
    member = fb.AttributesType()
    op_class = BY_WIRE.get(member)
    if op_class is None:
        raise SchemaError(f"{where}: unknown or missing op (union member {member})")
    table = fb.Attributes()
    if table is None:
        raise SchemaError(f"{where}: op attributes are missing")
    attributes = op_class._class()()
    attributes.Init(table.Bytes, table.Pos)
    return Node(name, op_class.from_fb(attributes, where, limits.max_rank), compute)


def deserialize(data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS, check: bool = True) -> Graph:
    """Parse a sigdnn graph buffer; with ``check``, also enforce the graph rules.

    Raises SchemaError for bytes that are not a well-formed sigdnn graph and
    GraphError for a well-formed graph that breaks a rule.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise SchemaError(f"expected bytes, got {type(data).__name__}")
    buf = _StrictBytes(data)
    if len(buf) < 12:
        raise SchemaError(f"buffer of {len(buf)} bytes is too short for a sigdnn graph")
    if not FbGraph.GraphBufferHasIdentifier(buf, 0):
        raise SchemaError(f"not a sigdnn graph: file identifier is {bytes(buf[4:8])!r}, expected {FILE_IDENTIFIER!r}")
    where = "graph header"
    try:
        root = FbGraph.GetRootAs(buf, 0)
        major, minor = root.SchemaVersionMajor(), root.SchemaVersionMinor()
        if major != SCHEMA_VERSION[0]:
            raise SchemaError(
                f"schema major version {major}.{minor} is not supported (this reader: {SCHEMA_VERSION[0]}.x)"
            )
        graph = Graph(
            _name(root.Name(), where, limits),
            _dtype(root.IoDataType(), "graph io dtype"),
            _dtype(root.IntermediateDataType(), "graph intermediate dtype"),
            _dtype(root.ComputeDataType(), "graph compute dtype"),
            preferred_engine_id=root.PreferredEngineId(),
            schema_version=(major, minor),
        )
        n_tensors = _count(root.TensorsLength(), limits.max_tensors, 4, len(buf), "tensors")
        for i in range(n_tensors):
            where = f"tensor #{i}"
            t = _tensor(root.Tensors(i), i, limits)
            if t.uid in graph.tensors:
                raise GraphError(f"duplicate tensor uid {t.uid} ('{graph.tensors[t.uid].name}' and '{t.name}')")
            graph.tensors[t.uid] = t
        n_nodes = _count(root.NodesLength(), limits.max_nodes, 4, len(buf), "nodes")
        for i in range(n_nodes):
            where = f"node #{i}"
            graph.nodes.append(_node(root.Nodes(i), i, limits))
    except _READ_ERRORS as e:
        raise SchemaError(f"malformed buffer while reading {where}: {type(e).__name__}: {e}") from None
    except RecursionError:
        raise SchemaError(f"malformed buffer while reading {where}: offsets loop") from None
    if check:
        from sigdnn.graph.checks import check_graph

        check_graph(graph, limits)
    return graph
