"""cuDNN-frontend graph JSON for tests, written from the frontend's published serialization (graph_interface.h
serialize(): json_version 2.0, context, tensors, nodes with port -> uid maps; serialize.h: tensor keys; float
attributes as the hex bits of a float32), not from sigdnn's reader."""

from __future__ import annotations

import json
import struct
from typing import Any

import numpy as np

import sigdnn

CUDNN_DTYPES = {
    "float32": "FLOAT",
    "float64": "DOUBLE",
    "float16": "HALF",
    "bfloat16": "BFLOAT16",
    "int8": "INT8",
    "uint8": "UINT8",
    "int32": "INT32",
    "int64": "INT64",
    "bool": "BOOLEAN",
    "fp8_e4m3": "FP8_E4M3",
    "fp8_e5m2": "FP8_E5M2",
}


def hex_float(x: float) -> str:
    """nlohmann adl_serializer<float> in cudnn_frontend_utils.h: upper-case hex of the float32 bits, 8 digits."""
    return f"{struct.unpack('<I', struct.pack('<f', x))[0]:08X}"


def tensor_json(graph: sigdnn.Graph, t: sigdnn.graph.Tensor) -> dict[str, Any]:
    dtype = graph.dtype_of(t).value
    pbv = None
    if t.value is not None:
        v = np.frombuffer(t.value, dtype=sigdnn.dtypes.as_data_type(dtype).numpy)[0]
        # variant<int64_t, int32_t, half, float, double, nv_bfloat16>: {"index", "value"}
        index = {"int64": 0, "int32": 1, "float16": 2, "float32": 3, "float64": 4, "bfloat16": 5}[dtype]
        pbv = {"index": index, "value": int(v) if index < 2 else float(v) if index == 4 else hex_float(float(v))}
    return {
        "data_type": CUDNN_DTYPES[dtype],
        "dim": list(t.dims),
        "stride": list(t.strides),
        "is_virtual": t.is_virtual,
        "pass_by_value": pbv,
        "is_pass_by_value": t.value is not None,
        "reordering_type": "NONE",
        "uid": t.uid,
        "name": t.name,
    }


def node(
    tag: str, name: str, inputs: dict[str, int], outputs: dict[str, int], compute: str | None = None, **attrs: Any
) -> dict[str, Any]:
    n = {"tag": tag, "name": name, "inputs": inputs, "outputs": outputs, **attrs}
    if compute is not False:
        n["compute_data_type"] = compute
    return n


def graph_json(graph: sigdnn.Graph, nodes: list[dict[str, Any]]) -> bytes:
    def dt(d: Any) -> str | None:
        return CUDNN_DTYPES[d.value] if d is not None else None

    doc = {
        "gid": 1,
        "context": {
            "compute_data_type": dt(graph.compute_dtype),
            "intermediate_data_type": dt(graph.intermediate_dtype),
            "io_data_type": dt(graph.io_dtype),
            "sm_count": -1,
            "is_dynamic_shape_enabled": False,
            "is_override_shape_enabled": False,
            "name": graph.name,
        },
        "json_version": "2.0",
        "cudnn_backend_version": "9.21.0",
        "cudnn_frontend_version": 11300,
        "nodes": nodes,
        "tensors": [tensor_json(graph, t) for t in sorted(graph.tensors.values(), key=lambda t: t.uid)],
    }
    return json.dumps(doc).encode()
