"""A minimal hipDNN graph writer for tests, written from hipDNN's published schema (flatbuffers_sdk), not
from sigdnn's reader: slot numbers are the field positions in graph.fbs, tensor_attributes.fbs and the
attribute tables; the NodeAttributes member is the table's position in graph.fbs's union plus one."""

from __future__ import annotations

import struct
from typing import Any

import flatbuffers
import numpy as np

import sigdnn

# data_types.fbs
HIP_DTYPES = {
    "float32": 1,
    "float16": 2,
    "bfloat16": 3,
    "float64": 4,
    "uint8": 5,
    "int32": 6,
    "int8": 7,
    "fp8_e4m3": 8,
    "fp8_e5m2": 9,
    "int64": 15,
}
# graph.fbs: NodeAttributes members
MEMBER = {
    "BatchnormInference": 1,
    "Pointwise": 2,
    "BatchnormBackward": 3,
    "Batchnorm": 4,
    "ConvolutionFwd": 5,
    "ConvolutionBwd": 6,
    "ConvolutionWrw": 7,
    "BatchnormInferenceVarianceExt": 8,
    "Matmul": 9,
    "RMSNorm": 10,
    "Layernorm": 11,
    "Sdpa": 12,
    "SdpaBackward": 15,
    "CustomOp": 16,
    "RMSNormBackward": 17,
    "Reduction": 18,
    "ResampleFwd": 19,
    "LayernormBackward": 20,
    "ResampleBwd": 21,
}


def _table(b: flatbuffers.Builder, fields: dict[int, tuple[str, Any]]) -> int:
    """A table from {slot: (kind, value)}; kinds long, bool, u8, f32, i32, offset (already built)."""
    b.StartObject(max(fields) + 1 if fields else 0)
    for slot, (kind, value) in sorted(fields.items()):
        if value is None:
            continue
        # defaults the value never equals: every given field is written
        if kind == "long":
            b.PrependInt64Slot(slot, int(value), int(value) + 1)
        elif kind == "bool":
            b.PrependBoolSlot(slot, bool(value), not bool(value))
        elif kind == "u8":
            b.PrependUint8Slot(slot, int(value), (int(value) + 1) % 256)
        elif kind == "f32":
            b.PrependFloat32Slot(slot, float(value), float("nan"))
        elif kind == "offset":
            b.PrependUOffsetTRelativeSlot(slot, value, 0)
    return b.EndObject()


def _longs(b: flatbuffers.Builder, values: Any) -> int:
    return b.CreateNumpyVector(np.asarray(list(values), dtype="<i8"))


def _offsets(b: flatbuffers.Builder, offsets: list[int]) -> int:
    b.StartVector(4, len(offsets), 4)
    for off in reversed(offsets):
        b.PrependUOffsetTRelative(off)
    return b.EndVector()


def _value_struct(b: flatbuffers.Builder, dtype: str, raw: bytes) -> tuple[int, int]:
    """(TensorValue member, offset of the struct): Float32Value 1, Float16Value 2, BFloat16Value 3 (a float each),
    Int32Value 5, Float64Value 6, Int64Value 7 (flatbuffers_sdk order)."""
    value = np.frombuffer(raw, dtype=sigdnn.dtypes.as_data_type(dtype).numpy)[0]
    member, fmt = {
        "float32": (1, "<f"),
        "float16": (2, "<f"),
        "bfloat16": (3, "<f"),
        "int32": (5, "<i"),
        "float64": (6, "<d"),
        "int64": (7, "<q"),
    }[dtype]
    size = struct.calcsize(fmt)
    b.Prep(size, 0)
    b.head -= size
    struct.pack_into(fmt, b.Bytes, b.head, float(value) if fmt in ("<f", "<d") else int(value))
    return member, b.Offset()


def tensor(b: flatbuffers.Builder, t: sigdnn.graph.Tensor, dtype: str, ragged: tuple[int, int] | None = None) -> int:
    name = b.CreateString(t.name)
    strides, dims = _longs(b, t.strides), _longs(b, t.dims)
    member = value = None
    if t.value is not None:
        member, value = _value_struct(b, dtype, t.value)
    # TensorAttributes: uid 0, name 1, data_type 2, strides 3, dims 4, virtual 5, value_type 6, value 7,
    # ragged_offset_tensor_uid 9, ragged_offset_multiplier 11
    fields = {
        0: ("long", t.uid),
        1: ("offset", name),
        2: ("u8", HIP_DTYPES[dtype]),
        3: ("offset", strides),
        4: ("offset", dims),
        5: ("bool", t.is_virtual),
        6: ("u8", member),
        7: ("offset", value),
    }
    if ragged is not None:
        fields.update({9: ("long", ragged[0]), 11: ("long", ragged[1])})
    return _table(b, fields)


def attributes(b: flatbuffers.Builder, fields: dict[int, tuple[str, Any]]) -> int:
    """An attribute table; vector fields given as ("longs", [...]) are built first."""
    built = {}
    for slot, (kind, value) in fields.items():
        if kind == "longs":
            built[slot] = ("offset", _longs(b, value))
        else:
            built[slot] = (kind, value)
    return _table(b, built)


def graph_buffer(
    graph: sigdnn.Graph,
    nodes: list[tuple[str, str | None, str, dict[int, tuple[str, Any]]]],
    name: str | None = None,
    ragged: dict[int, tuple[int, int]] | None = None,
) -> bytes:
    """hipDNN bytes for ``graph``'s tensors and the given nodes (name, compute dtype, member name, fields);
    ``ragged``: tensor uid -> (its ragged offset tensor's uid, the multiplier)."""
    b = flatbuffers.Builder(1024)
    ragged = ragged or {}
    tensors = [tensor(b, t, graph.dtype_of(t).value, ragged.get(t.uid)) for t in graph.tensors.values()]
    node_offsets = []
    for node_name, compute, member, fields in nodes:
        attrs_off = attributes(b, fields)
        n = b.CreateString(node_name)
        # Node: name 0, compute_data_type 1, attributes_type 2, attributes 3
        node_offsets.append(
            _table(
                b,
                {
                    0: ("offset", n),
                    1: ("u8", HIP_DTYPES[compute] if compute else None),
                    2: ("u8", MEMBER[member]),
                    3: ("offset", attrs_off),
                },
            )
        )
    t_vec, n_vec = _offsets(b, tensors), _offsets(b, node_offsets)
    gname = b.CreateString(name or graph.name)

    def code(dt: Any) -> int | None:
        return HIP_DTYPES[dt.value] if dt is not None else None

    # Graph: name 0, compute 1, intermediate 2, io 3, tensors 4, nodes 5
    root = _table(
        b,
        {
            0: ("offset", gname),
            1: ("u8", code(graph.compute_dtype)),
            2: ("u8", code(graph.intermediate_dtype)),
            3: ("u8", code(graph.io_dtype)),
            4: ("offset", t_vec),
            5: ("offset", n_vec),
        },
    )
    b.Finish(root)
    return bytes(b.Output())
