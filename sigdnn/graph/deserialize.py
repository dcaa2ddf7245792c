"""FlatBuffers bytes -> Graph, treating every buffer as hostile.

Order of checks: size, file identifier, major schema version, then every
table and vector through the bounds-checked reader, every count against
Limits before it is iterated, every enum and union member against the
schema. Whatever fails is a SchemaError (bad bytes) or a GraphError (limits)
naming the tensor or node being read.
"""

from __future__ import annotations

import os
import struct

import sigdnn.schemas.Graph as fb_graph
import sigdnn.schemas.Node as fb_node
import sigdnn.schemas.Tensor as fb_tensor
from sigdnn.dtypes import DataType, from_wire
from sigdnn.errors import GraphError, SchemaError
from sigdnn.graph.graph import SCHEMA_VERSION, Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.graph.node import Node
from sigdnn.graph.ops import op_by_wire
from sigdnn.graph.serialize import FILE_IDENTIFIER
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.wire_reader import Buffer, Table, slots_of

# Low-level failures the reader's explicit checks should make impossible; if one
# slips through it is still a bad buffer, never a crash.
_READ_ERRORS = (struct.error, IndexError, ValueError, OverflowError)
_G = slots_of(fb_graph)
_T = slots_of(fb_tensor)
_N = slots_of(fb_node)


def _dtype(value: int, where: str) -> DataType | None:
    try:
        return from_wire(value)
    except KeyError:
        raise SchemaError(f"{where}: unknown data type {value}") from None


def _located(where: str, e: SchemaError | GraphError) -> SchemaError | GraphError:
    """``e`` (same class) with ``where`` in front, once (inner readers may already have named it)."""
    msg = str(e)
    return type(e)(msg if msg.startswith(where) else f"{where}: {msg}")


def _tensor(buf: Buffer, pos: int, index: int, limits: Limits) -> Tensor:
    where = f"tensor #{index}"
    try:
        t = Table(buf, pos)
        uid = t.scalar(_T["Uid"], "i64", 0)
        where = f"tensor #{index} (uid {uid})"
        name = t.string(_T["Name"], limits.max_name_length) or ""
        where = f"tensor '{name}' (uid {uid})"
        dtype = _dtype(t.scalar(_T["DataType"], "i8", 0), where)
        dims = t.int64s(_T["Dims"], limits.max_rank)
        strides = t.int64s(_T["Strides"], limits.max_rank)
        value = None
        if t.scalar(_T["IsPassByValue"], "bool", False):
            value = t.raw_bytes(_T["Value"], limits.max_scalar_bytes) or b""
        virtual = bool(t.scalar(_T["IsVirtual"], "bool", False))
        data = t.raw_bytes(_T["Data"], limits.max_total_bytes)
    except (SchemaError, GraphError) as e:
        raise _located(where, e) from None
    return Tensor(uid, name, dims, strides, dtype, virtual, value, data)


def _node(buf: Buffer, pos: int, index: int, limits: Limits) -> Node:
    where = f"node #{index}"
    try:
        n = Table(buf, pos)
        name = n.string(_N["Name"], limits.max_name_length) or ""
        where = f"node '{name}'"
        compute = _dtype(n.scalar(_N["ComputeDataType"], "i8", 0), where)
        member = n.scalar(_N["AttributesType"], "u8", 0)
        op_class = op_by_wire(member)
        if op_class is None:
            raise SchemaError(f"unknown or missing op (union member {member})")
        attributes = n.table_at(_N["Attributes"])
        if attributes is None:
            raise SchemaError("op attributes are missing")
        op = op_class.from_fb(attributes, where, limits)
    except (SchemaError, GraphError) as e:
        raise _located(where, e) from None
    return Node(name, op, compute)


def _graph_name(root: Table, limits: Limits) -> str:
    try:
        return root.string(_G["Name"], limits.max_name_length) or ""
    except GraphError as e:
        raise GraphError(f"the graph's name: {e}") from None


def _count(root: Table, slot: int, limit: int, what: str) -> list[int]:
    """Positions of the graph's tensors or nodes, their count checked against the limit first."""
    try:
        n = root.vector_length(slot, 4)
        if n > limit:
            raise GraphError(f"graph declares {n} {what} (limit {limit})")
        positions = root.tables(slot)
    except SchemaError as e:
        raise SchemaError(f"the graph's {what} vector: {e}") from None
    if len(set(positions)) != len(positions):
        # Our writer never shares a table; a reader that parsed each entry would pay once per reference.
        seen: set[int] = set()
        index = next(i for i, p in enumerate(positions) if p in seen or seen.add(p))
        raise SchemaError(f"the graph's {what} vector: entry #{index} points at a table an earlier entry already uses")
    return positions


def deserialize(data: bytes | bytearray | memoryview, *, limits: Limits = DEFAULT_LIMITS, check: bool = True) -> Graph:
    """Parse a sigdnn graph buffer; with ``check``, also enforce the graph rules.

    Raises SchemaError for bytes that are not a well-formed sigdnn graph and
    GraphError for a well-formed graph that breaks a rule or a limit.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        hint = "; to read a file, use sigdnn.load(path)" if isinstance(data, (str, os.PathLike)) else ""
        raise SchemaError(f"expected bytes, got {type(data).__name__}{hint}")
    try:
        data = bytes(data)
    except ValueError as e:  # a released memoryview
        raise SchemaError(f"the buffer could not be read: {e}") from None
    if len(data) < 12:
        raise SchemaError(f"buffer of {len(data)} bytes is too short for a sigdnn graph")
    if data[4:8] != FILE_IDENTIFIER:
        raise SchemaError(f"not a sigdnn graph: file identifier is {data[4:8]!r}, expected {FILE_IDENTIFIER!r}")
    buf = Buffer(data)
    where = "graph header"
    try:
        try:
            root = buf.root()
            major = root.scalar(_G["SchemaVersionMajor"], "u16", 0)
            minor = root.scalar(_G["SchemaVersionMinor"], "u16", 0)
            if major != SCHEMA_VERSION[0]:
                raise SchemaError(
                    f"schema version {major}.{minor} is not supported (this reader: {SCHEMA_VERSION[0]}.x)"
                )
            graph = Graph(
                _graph_name(root, limits),
                _dtype(root.scalar(_G["IoDataType"], "i8", 0), "graph io dtype"),
                _dtype(root.scalar(_G["IntermediateDataType"], "i8", 0), "graph intermediate dtype"),
                _dtype(root.scalar(_G["ComputeDataType"], "i8", 0), "graph compute dtype"),
                preferred_engine_id=root.scalar(_G["PreferredEngineId"], "i64"),
                schema_version=(major, minor),
            )
        except SchemaError as e:
            raise _located(where, e) from None
        tensors = graph.tensors
        for i, pos in enumerate(_count(root, _G["Tensors"], limits.max_tensors, "tensors")):
            where = f"tensor #{i}"
            t = _tensor(buf, pos, i, limits)
            if t.uid in tensors:
                raise GraphError(f"duplicate tensor uid {t.uid} ('{tensors[t.uid].name}' and '{t.name}')")
            tensors[t.uid] = t
        for i, pos in enumerate(_count(root, _G["Nodes"], limits.max_nodes, "nodes")):
            where = f"node #{i}"
            graph.nodes.append(_node(buf, pos, i, limits))
    except _READ_ERRORS as e:  # a read the explicit checks did not foresee
        raise SchemaError(f"malformed buffer while reading {where}: {type(e).__name__}: {e}") from None
    if check:
        from sigdnn.graph.checks import check_graph

        check_graph(graph, limits)
    return graph
