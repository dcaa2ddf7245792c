"""Graph -> FlatBuffers bytes. Deterministic: equal graphs give equal bytes."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import flatbuffers
import numpy as np

import sigdnn.schemas.Graph as fb_graph
import sigdnn.schemas.Node as fb_node
import sigdnn.schemas.Tensor as fb_tensor
from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor

FILE_IDENTIFIER = b"SDG1"


def _vector(builder: flatbuffers.Builder, values: tuple[int, ...]) -> int:
    return builder.CreateNumpyVector(np.asarray(values, dtype="<i8"))


def _tensor(builder: flatbuffers.Builder, graph: Graph, t: Tensor, data_of: dict[int, bytes]) -> int:
    name = builder.CreateString(t.name)
    dims = _vector(builder, t.dims)
    strides = _vector(builder, t.strides)
    value = builder.CreateByteVector(t.value) if t.value is not None else None
    data = builder.CreateByteVector(data_of[t.uid]) if t.data is not None else None
    dtype = graph.dtype_of(t)
    fb_tensor.Start(builder)
    fb_tensor.AddUid(builder, t.uid)
    fb_tensor.AddName(builder, name)
    fb_tensor.AddDataType(builder, dtype.wire)
    fb_tensor.AddDims(builder, dims)
    fb_tensor.AddStrides(builder, strides)
    fb_tensor.AddIsVirtual(builder, t.is_virtual)
    if value is not None:
        fb_tensor.AddIsPassByValue(builder, True)
        fb_tensor.AddValue(builder, value)
    if data is not None:
        fb_tensor.AddData(builder, data)
    return fb_tensor.End(builder)


def _offsets(builder: flatbuffers.Builder, offsets: list[int]) -> int:
    builder.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        builder.PrependUOffsetTRelative(off)
    return builder.EndVector()


def serialize(graph: Graph, constant: Callable[[bytes], bytes] | None = None) -> bytes:
    """Write ``graph`` as a sigdnn FlatBuffers buffer (identifier SDG1); ``constant``: what to write for a
    constant tensor's data (the data itself unless a fingerprint is wanted)."""
    data_of = {
        t.uid: t.data if constant is None else constant(t.data) for t in graph.tensors.values() if t.data is not None
    }
    constant_bytes = sum(len(b) + 8 for b in data_of.values())
    builder = flatbuffers.Builder(1024 + 160 * len(graph.tensors) + 96 * len(graph.nodes) + constant_bytes)
    tensors = [_tensor(builder, graph, t, data_of) for t in graph.tensors.values()]
    nodes = []
    for n in graph.nodes:
        name = builder.CreateString(n.name)
        attributes = n.op.to_fb(builder)
        fb_node.Start(builder)
        fb_node.AddName(builder, name)
        if n.compute_dtype is not None:
            fb_node.AddComputeDataType(builder, n.compute_dtype.wire)
        fb_node.AddAttributesType(builder, n.op.codec().member)
        fb_node.AddAttributes(builder, attributes)
        nodes.append(fb_node.End(builder))
    tensor_vec = _offsets(builder, tensors)
    node_vec = _offsets(builder, nodes)
    name = builder.CreateString(graph.name)
    fb_graph.Start(builder)
    fb_graph.AddSchemaVersionMajor(builder, graph.schema_version[0])
    fb_graph.AddSchemaVersionMinor(builder, graph.schema_version[1])
    fb_graph.AddName(builder, name)
    for field, dtype in (
        (fb_graph.AddIoDataType, graph.io_dtype),
        (fb_graph.AddIntermediateDataType, graph.intermediate_dtype),
        (fb_graph.AddComputeDataType, graph.compute_dtype),
    ):
        if dtype is not None:
            field(builder, dtype.wire)
    fb_graph.AddTensors(builder, tensor_vec)
    fb_graph.AddNodes(builder, node_vec)
    if graph.preferred_engine_id is not None:
        fb_graph.AddPreferredEngineId(builder, graph.preferred_engine_id)
    builder.Finish(fb_graph.End(builder), FILE_IDENTIFIER)
    return bytes(builder.Output())


_DIGEST_ABOVE = 64  # bytes: longer constants are stood for by a 32-byte digest, which no valid tensor of theirs holds


def _digest(data: bytes) -> bytes:
    """SHA-256: the CPU's SHA instructions (x86 SHA-NI, ARMv8) hash about twice as fast as BLAKE2b (1.7 GB/s)."""
    return hashlib.sha256(data).digest() if len(data) > _DIGEST_ABOVE else data


def fingerprint(graph: Graph) -> bytes:
    """Bytes that tell graphs apart as ``serialize``'s do, each constant longer than 64 bytes written as its digest:
    a plan-cache key for a Graph that costs one hash of its weights, not their copy into a FlatBuffer (ViT-B/16's
    330 MB: most of prepare). A digest's 32 bytes can stand for no real constant of those dims, which hold more."""
    return serialize(graph, _digest)
