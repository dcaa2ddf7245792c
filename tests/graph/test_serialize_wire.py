"""serialize's bytes read field by field with the FlatBuffers accessors generated from schemas/sigdnn.fbs.

The round-trip tests compare serialize with sigdnn's own reader; these check
the wire itself against the schema (field values, enum numbers written out by
hand from the .fbs), so a writer and reader that agree on a wrong field are
still caught.
"""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

import sigdnn
import sigdnn.schemas.Graph as fb_graph
from sigdnn.graph import SCHEMA_VERSION
from sigdnn.graph.serialize import fingerprint, serialize
from sigdnn.schemas.NodeAttributes import NodeAttributes
from sigdnn.schemas.PointwiseAttributes import PointwiseAttributes

# DataType as schemas/sigdnn.fbs numbers it (UNSET = 0, then in order).
FLOAT32, FLOAT16, BFLOAT16, FLOAT64, INT8, INT32 = 1, 2, 3, 4, 7, 9


def read(data: bytes) -> fb_graph.Graph:
    assert fb_graph.Graph.GraphBufferHasIdentifier(data, 0), "the buffer lacks the SDG1 file identifier"
    return fb_graph.Graph.GetRootAs(data, 0)


def tensors_by_name(root: fb_graph.Graph) -> dict[str, object]:
    return {root.Tensors(i).Name().decode(): root.Tensors(i) for i in range(root.TensorsLength())}


def strided_graph() -> sigdnn.Graph:
    g = sigdnn.Graph(
        "wire", io_dtype="float16", intermediate_dtype="float32", compute_dtype="float64", preferred_engine_id=1000
    )
    x = g.tensor("x", dims=(2, 3), strides=(1, 2), uid=-(2**40))
    s = g.scalar("s", 0.5, dtype="float32", uid=11)
    w = g.constant("w", np.array([[1, -2, 3]], dtype=np.int32), uid=12)
    t = g.pointwise("add", x, s, name="first", compute_dtype="float32")
    t.set_name("t")
    y = g.pointwise("mul", t, w, name="second")
    y.set_output(True).set_name("y")
    return g


def test_graph_header_fields_are_the_schema_values() -> None:
    root = read(serialize(strided_graph()))
    assert (root.SchemaVersionMajor(), root.SchemaVersionMinor()) == SCHEMA_VERSION
    assert root.Name() == b"wire"
    assert (root.IoDataType(), root.IntermediateDataType(), root.ComputeDataType()) == (FLOAT16, FLOAT32, FLOAT64)
    assert root.PreferredEngineId() == 1000
    assert root.TensorsLength() == 5 and root.NodesLength() == 2


def test_a_graph_without_graph_dtypes_or_engine_leaves_them_unset() -> None:
    g = sigdnn.Graph("bare")
    g.tensor("x", dims=(1,), dtype="int8")
    root = read(serialize(g))
    assert (root.IoDataType(), root.IntermediateDataType(), root.ComputeDataType()) == (0, 0, 0)
    assert root.PreferredEngineId() is None  # `= null` in the schema: absent, not 0
    assert root.NodesLength() == 0
    (x,) = tensors_by_name(root).values()
    assert x.DataType() == INT8


def test_engine_id_zero_is_written_not_dropped() -> None:
    g = sigdnn.Graph("zero", io_dtype="float32", preferred_engine_id=0)
    g.pointwise("abs", g.tensor("x", dims=(2,))).set_output(True)
    assert read(serialize(g)).PreferredEngineId() == 0


def test_tensor_fields_are_written_as_declared() -> None:
    tensors = tensors_by_name(read(serialize(strided_graph())))
    x, s, w, t, y = (tensors[n] for n in ("x", "s", "w", "t", "y"))
    assert x.Uid() == -(2**40)
    assert x.DataType() == FLOAT16
    assert x.DimsAsNumpy().tolist() == [2, 3] and x.StridesAsNumpy().tolist() == [1, 2]
    assert not x.IsVirtual() and not x.IsPassByValue() and x.ValueIsNone() and x.DataIsNone()
    assert s.Uid() == 11 and s.DataType() == FLOAT32
    assert s.IsPassByValue() and s.ValueAsNumpy().tobytes() == np.float32(0.5).astype("<f4").tobytes()
    assert s.DataIsNone()
    assert w.Uid() == 12 and w.DataType() == INT32 and not w.IsPassByValue() and w.ValueIsNone()
    assert w.DataAsNumpy().tobytes() == np.array([1, -2, 3], dtype="<i4").tobytes()
    assert w.DimsAsNumpy().tolist() == [1, 3] and w.StridesAsNumpy().tolist() == [3, 1]
    assert t.IsVirtual() and t.DataType() == FLOAT32  # an unnamed intermediate takes the intermediate dtype
    assert not y.IsVirtual() and y.DataType() == FLOAT16


def test_node_fields_and_their_attributes() -> None:
    g = strided_graph()
    root = read(serialize(g))
    uids = {root.Tensors(i).Name().decode(): root.Tensors(i).Uid() for i in range(root.TensorsLength())}
    first, second = root.Nodes(0), root.Nodes(1)
    assert first.Name() == b"first" and second.Name() == b"second"
    assert first.ComputeDataType() == FLOAT32
    assert second.ComputeDataType() == 0  # none declared: UNSET on the wire
    assert first.AttributesType() == NodeAttributes.PointwiseAttributes
    attributes = PointwiseAttributes()
    attributes.Init(first.Attributes().Bytes, first.Attributes().Pos)
    assert attributes.Mode() == 0  # ADD
    assert (attributes.In0(), attributes.In1(), attributes.Out0()) == (uids["x"], uids["s"], uids["t"])


def test_a_graph_with_many_tensors_and_nodes_writes_every_one_in_order() -> None:
    """Enough of both that the builder grows past its first guess; every offset vector still reads back."""
    g = sigdnn.Graph("chain", io_dtype="float32")
    t = g.tensor("x0", dims=(4,))
    for i in range(60):
        t = g.pointwise("abs", t, name=f"n{i}")
        t.set_name(f"x{i + 1}")
    t.set_output(True)
    root = read(serialize(g))
    assert [root.Tensors(i).Name().decode() for i in range(root.TensorsLength())] == [f"x{i}" for i in range(61)]
    assert [root.Nodes(i).Name().decode() for i in range(root.NodesLength())] == [f"n{i}" for i in range(60)]


def test_large_constants_are_written_whole() -> None:
    """More constant bytes than the rest of the graph: the buffer is sized for them, and they are exact."""
    values = np.random.default_rng(1).standard_normal((256, 256)).astype(np.float32)
    g = sigdnn.Graph("weights", io_dtype="float32")
    g.matmul(g.tensor("x", dims=(2, 256)), g.constant("w", values)).set_output(True)
    w = tensors_by_name(read(serialize(g)))["w"]
    assert w.DataAsNumpy().tobytes() == values.astype("<f4").tobytes()


@pytest.mark.parametrize(("nbytes", "digested"), [(64, False), (65, True)])
def test_fingerprint_digests_exactly_the_constants_over_64_bytes(nbytes: int, digested: bool) -> None:
    values = np.arange(nbytes, dtype=np.uint8)
    g = sigdnn.Graph("fp", io_dtype="uint8")
    g.pointwise("add", g.tensor("x", dims=(nbytes,)), g.constant("c", values)).set_output(True)
    c = tensors_by_name(read(fingerprint(g)))["c"]
    want = hashlib.sha256(values.tobytes()).digest() if digested else values.tobytes()
    assert c.DataAsNumpy().tobytes() == want
    assert (fingerprint(g) == serialize(g)) is not digested


def vector_start(table: object, slot: int) -> int | None:
    """Where the elements of the vector in field ``slot`` (the vtable offset: 4 for the first field) begin."""
    tab = table._tab  # type: ignore[attr-defined]
    offset = tab.Offset(slot)
    return tab.Vector(offset) if offset else None


@pytest.mark.parametrize("count", [1, 2, 3, 5, 6])
def test_every_vector_and_table_is_aligned_as_flatbuffers_verifiers_require(count: int) -> None:
    """A C++ reader verifies the buffer before use, and its verifier refuses a misaligned vector or table: a
    vector's length and offsets on 4 bytes, its int64 elements on 8. The Python accessors would not notice."""
    g = sigdnn.Graph("aligned", io_dtype="float32")
    t = g.tensor("x", dims=(3,))
    for i in range(count):
        t = g.pointwise("neg", t, name=f"n{i}")
    t.set_output(True)
    root = read(serialize(g))
    for slot in (16, 18):  # tensors, nodes: vectors of offsets
        start = vector_start(root, slot)
        assert start is not None and start % 4 == 0, f"graph field at slot {slot} starts at {start}"
    for i in range(root.TensorsLength()):
        tensor = root.Tensors(i)
        assert tensor._tab.Pos % 4 == 0
        for slot in (10, 12):  # dims, strides: int64 vectors
            start = vector_start(tensor, slot)
            assert start is not None and start % 8 == 0, f"tensor {i} field at slot {slot} starts at {start}"
    assert all(root.Nodes(i)._tab.Pos % 4 == 0 for i in range(root.NodesLength()))
