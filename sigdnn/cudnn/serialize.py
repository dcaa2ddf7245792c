"""A sigdnn graph as cuDNN-frontend graph JSON (``json_version`` "2.0"), what pygraph.serialize writes.

The layout is the one ``sigdnn.importers.cudnn_json`` reads (cuDNN-frontend's
``Graph::serialize``): a context with the graph's data types, tensors with
uid / name / data_type / dim / stride / is_virtual / pass-by-value, and
nodes by tag with their ports by cuDNN's names. sigdnn keeps epsilon and
momentum as attributes; they are written as cuDNN writes them, as
pass-by-value input tensors (double, so the value survives exactly), added
after the graph's own uids. A float attribute is written as cuDNN writes
floats (the hex of its float32 bits) when float32 holds it exactly, else as
a JSON number (which sigdnn reads exactly). Variable-length attention is
cuDNN's: ``padding_mask`` with the SEQ_LEN_Q / SEQ_LEN_KV inputs, and a
``ragged_offset_uid`` on each ragged tensor (gradients share their forward
tensor's). Ops cuDNN's JSON has no tag for (softmax, pooling backward,
resample, the linear-attention ops) raise NotImplementedError naming the node.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from sigdnn.dtypes import DataType
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.sdpa import Band

JSON_VERSION = "2.0"
NAMES = {
    DataType.FLOAT32: "FLOAT", DataType.FLOAT64: "DOUBLE", DataType.FLOAT16: "HALF", DataType.BFLOAT16: "BFLOAT16",
    DataType.INT8: "INT8", DataType.UINT8: "UINT8", DataType.INT32: "INT32", DataType.INT64: "INT64",
    DataType.BOOL: "BOOLEAN", DataType.FP8_E4M3: "FP8_E4M3", DataType.FP8_E5M2: "FP8_E5M2",
}  # fmt: skip
# pass-by-value variant<int64_t, int32_t, half, float, double, nv_bfloat16>: its index per dtype
VALUE_INDEX = {DataType.INT64: 0, DataType.INT32: 1, DataType.FLOAT16: 2, DataType.FLOAT32: 3, DataType.FLOAT64: 4,
               DataType.BFLOAT16: 5}  # fmt: skip
_F32 = struct.Struct("<f")


def real(value: float) -> str | float:
    """cuDNN's float: the 8 hex digits of its float32 bits when float32 holds it exactly, else the number."""
    try:
        bits = _F32.pack(value)
    except OverflowError:
        return value
    if _F32.unpack(bits)[0] != value:
        return value
    return f"{struct.unpack('<I', bits)[0]:08X}"


class Writer:
    """Collects the JSON tensors and nodes of one graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.tensors = [self.tensor(t) for t in sorted(graph.tensors.values(), key=lambda t: t.uid)]
        self.nodes: list[dict[str, Any]] = []
        self.top = max(graph.tensors, default=0)
        self.ragged: dict[int, int] = {}  # tensor uid -> its ragged offset tensor's uid

    def tensor(self, t: Any) -> dict[str, Any]:
        dtype = self.graph.dtype_of(t)
        out = {"uid": t.uid, "name": t.name, "data_type": NAMES[dtype], "dim": list(t.dims), "stride": list(t.strides),
               "is_virtual": t.is_virtual, "is_pass_by_value": t.value is not None, "reordering_type": "NONE"}  # fmt: skip
        if t.data is not None:
            raise NotImplementedError(f"pygraph.serialize(): tensor '{t.name}' is a constant; cuDNN JSON has none")
        if t.value is not None:
            if dtype not in VALUE_INDEX:
                raise NotImplementedError(f"pygraph.serialize(): pass-by-value '{t.name}' of {dtype} has no JSON form")
            value = t.scalar().item()
            index = VALUE_INDEX[dtype]
            out["pass_by_value"] = {"index": index, "value": value if index in (0, 1, 4) else real(float(value))}
        return out

    def scalar(self, node: Node, what: str, value: float) -> int:
        """A new pass-by-value double tensor holding ``value`` (how cuDNN passes epsilon and momentum)."""
        self.top += 1
        self.tensors.append({"uid": self.top, "name": f"{node.name}::{what}", "data_type": "DOUBLE", "dim": [1],
                             "stride": [1], "is_virtual": False, "is_pass_by_value": True,
                             "pass_by_value": {"index": 4, "value": float(value)}, "reordering_type": "NONE"})  # fmt: skip
        return self.top

    def node(self, node: Node) -> None:
        write = WRITERS.get(node.kind)
        if write is None:
            raise NotImplementedError(f"pygraph.serialize(): node '{node.name}' ({node.kind}) has no cuDNN JSON tag")
        tag, inputs, outputs, attributes = write(self, node, node.op)
        out: dict[str, Any] = {"tag": tag, "name": node.name}
        if node.compute_dtype is not None:
            out["compute_data_type"] = NAMES[node.compute_dtype]
        out["inputs"] = {p: u for p, u in inputs.items() if u is not None}
        out["outputs"] = {p: u for p, u in outputs.items() if u is not None}
        self.nodes.append({**out, **attributes})


Written = tuple[str, dict[str, Any], dict[str, Any], dict[str, Any]]
WRITERS: dict[str, Callable[[Writer, Node, Any], Written]] = {}


def writes(kind: str) -> Callable[[Callable[[Writer, Node, Any], Written]], Callable[[Writer, Node, Any], Written]]:
    def register(fn: Callable[[Writer, Node, Any], Written]) -> Callable[[Writer, Node, Any], Written]:
        WRITERS[kind] = fn
        return fn

    return register


def _conv(op: Any) -> dict[str, Any]:
    return {"pre_padding": list(op.pre_padding), "post_padding": list(op.post_padding), "stride": list(op.stride),
            "dilation": list(op.dilation), "math_mode": "CROSS_CORRELATION"}  # fmt: skip


@writes("conv_fprop")
def _conv_fprop(w: Writer, n: Node, op: Any) -> Written:
    return "CONV_FPROP", {"X": op.x, "W": op.w}, {"Y": op.y}, _conv(op)


@writes("conv_dgrad")
def _conv_dgrad(w: Writer, n: Node, op: Any) -> Written:
    return "CONV_DGRAD", {"DY": op.dy, "W": op.w}, {"DX": op.dx}, _conv(op)


@writes("conv_wgrad")
def _conv_wgrad(w: Writer, n: Node, op: Any) -> Written:
    return "CONV_WGRAD", {"X": op.x, "DY": op.dy}, {"DW": op.dw}, _conv(op)


@writes("pointwise")
def _pointwise(w: Writer, n: Node, op: Any) -> Written:
    params = ("relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope", "swish_beta", "elu_alpha", "softplus_beta")
    attributes: dict[str, Any] = {"mode": op.mode.upper()}
    attributes.update({p: real(getattr(op, p)) for p in params if getattr(op, p) is not None})
    if op.axis is not None:
        attributes["axis"] = op.axis
    return "POINTWISE", {"IN_0": op.in_0, "IN_1": op.in_1, "IN_2": op.in_2}, {"OUT_0": op.out_0}, attributes


@writes("matmul")
def _matmul(w: Writer, n: Node, op: Any) -> Written:
    return "MATMUL", {"A": op.a, "B": op.b}, {"C": op.c}, {}


@writes("reduction")
def _reduction(w: Writer, n: Node, op: Any) -> Written:
    return "REDUCTION", {"X": op.x}, {"Y": op.y}, {"mode": op.mode.upper()}


@writes("batchnorm")
def _batchnorm(w: Writer, n: Node, op: Any) -> Written:
    inputs = {"X": op.x, "SCALE": op.scale, "BIAS": op.bias, "PREV_RUNNING_MEAN": op.in_running_mean,
              "PREV_RUNNING_VAR": op.in_running_var, "EPSILON": w.scalar(n, "epsilon", op.epsilon)}  # fmt: skip
    if op.momentum is not None:
        inputs["MOMENTUM"] = w.scalar(n, "momentum", op.momentum)
    outputs = {"Y": op.y, "MEAN": op.mean, "INV_VARIANCE": op.inv_variance, "NEXT_RUNNING_MEAN": op.next_running_mean,
               "NEXT_RUNNING_VAR": op.next_running_var}  # fmt: skip
    return "BATCHNORM", inputs, outputs, {"peer_stats": []}


@writes("batchnorm_inference")
def _batchnorm_inference(w: Writer, n: Node, op: Any) -> Written:
    inputs = {"X": op.x, "MEAN": op.mean, "INV_VARIANCE": op.inv_variance, "SCALE": op.scale, "BIAS": op.bias}
    return "BATCHNORM_INFERENCE", inputs, {"Y": op.y}, {}


@writes("batchnorm_backward")
def _batchnorm_backward(w: Writer, n: Node, op: Any) -> Written:
    inputs = {"DY": op.dy, "X": op.x, "SCALE": op.scale, "MEAN": op.mean, "INV_VARIANCE": op.inv_variance}
    return "DBN", inputs, {"DX": op.dx, "DSCALE": op.dscale, "DBIAS": op.dbias}, {"peer_stats": []}


@writes("layernorm")
def _layernorm(w: Writer, n: Node, op: Any) -> Written:
    inputs = {"X": op.x, "SCALE": op.scale, "BIAS": op.bias, "EPSILON": w.scalar(n, "epsilon", op.epsilon)}
    outputs = {"Y": op.y, "MEAN": op.mean, "INV_VARIANCE": op.inv_variance}
    return "LAYER_NORM", inputs, outputs, {"forward_phase": op.phase.upper()}


@writes("layernorm_backward")
def _layernorm_backward(w: Writer, n: Node, op: Any) -> Written:
    inputs = {"DY": op.dy, "X": op.x, "SCALE": op.scale, "MEAN": op.mean, "INV_VARIANCE": op.inv_variance}
    return "LAYER_NORM_BPROP", inputs, {"DX": op.dx, "DSCALE": op.dscale, "DBIAS": op.dbias}, {}


@writes("rmsnorm")
def _rmsnorm(w: Writer, n: Node, op: Any) -> Written:
    inputs = {"X": op.x, "SCALE": op.scale, "BIAS": op.bias, "EPSILON": w.scalar(n, "epsilon", op.epsilon)}
    return "RMS_NORM", inputs, {"Y": op.y, "INV_VARIANCE": op.inv_variance}, {"forward_phase": op.phase.upper()}


@writes("rmsnorm_backward")
def _rmsnorm_backward(w: Writer, n: Node, op: Any) -> Written:
    inputs = {"DY": op.dy, "X": op.x, "SCALE": op.scale, "INV_VARIANCE": op.inv_variance}
    return "RMS_NORM_BPROP", inputs, {"DX": op.dx, "DSCALE": op.dscale, "DBIAS": op.dbias}, {}


def _attention(w: Writer, op: Any, placed: dict[str, tuple[int | None, ...]]) -> dict[str, Any]:
    """The attention attributes; records the ragged offsets of ``placed`` (q / k / v / o -> uids placed by it)."""
    out: dict[str, Any] = {"attn_scale_value": real(op.attn_scale)}
    band = Band.of(op)
    if band.masks:
        out["diagonal_alignment"] = "BOTTOM_RIGHT" if band.bottom_right else "TOP_LEFT"
        out.update({name: value for name, value in (("left_bound", band.left), ("right_bound", band.right))
                    if value is not None})  # fmt: skip
    if op.seq_len_q is not None:
        out["padding_mask"] = True
    for port, uids in placed.items():
        offset = getattr(op, f"{port}_ragged_offset")
        if offset is not None:
            w.ragged.update({uid: offset for uid in uids if uid is not None})
    return out


def _lengths(op: Any) -> dict[str, Any]:
    return {"SEQ_LEN_Q": op.seq_len_q, "SEQ_LEN_KV": op.seq_len_kv}


@writes("sdpa")
def _sdpa(w: Writer, n: Node, op: Any) -> Written:
    placed = {"q": (op.q,), "k": (op.k,), "v": (op.v,), "o": (op.o,)}
    attributes = {**_attention(w, op, placed), "generate_stats": op.generate_stats}
    inputs = {"Q": op.q, "K": op.k, "V": op.v, "Bias": op.bias, **_lengths(op)}
    return "SDPA", inputs, {"O": op.o, "Stats": op.stats}, attributes


@writes("sdpa_backward")
def _sdpa_backward(w: Writer, n: Node, op: Any) -> Written:
    inputs = {"Q": op.q, "K": op.k, "V": op.v, "O": op.o, "dO": op.d_o, "Stats": op.stats, "Bias": op.bias,
              **_lengths(op)}  # fmt: skip
    placed = {"q": (op.q, op.dq), "k": (op.k, op.dk), "v": (op.v, op.dv), "o": (op.o, op.d_o)}
    return "SDPA_BWD", inputs, {"dQ": op.dq, "dK": op.dk, "dV": op.dv}, _attention(w, op, placed)


@writes("reshape")
def _reshape(w: Writer, n: Node, op: Any) -> Written:
    return "RESHAPE", {"X": op.x}, {"Y": op.y}, {"reshape_mode": "LOGICAL"}


@writes("transpose")
def _transpose(w: Writer, n: Node, op: Any) -> Written:
    return "TRANSPOSE", {"X": op.x}, {"Y": op.y}, {"permutation": list(op.permutation)}


@writes("slice")
def _slice(w: Writer, n: Node, op: Any) -> Written:
    slices = [[s, e] for s, e in zip(op.start_indices, op.limit_indices)]
    return "SLICE", {"X": op.x}, {"Y": op.y}, {"slices": slices, "slice_strides": list(op.strides)}


@writes("concatenate")
def _concatenate(w: Writer, n: Node, op: Any) -> Written:
    return "CONCATENATE", {str(i): u for i, u in enumerate(op.x)}, {"Y": op.y}, {"axis": op.axis}


def to_json(graph: Graph) -> bytes:
    """The graph as cuDNN-frontend JSON bytes (UTF-8)."""
    writer = Writer(graph)
    for node in graph.nodes:
        writer.node(node)
    for t in writer.tensors:
        if t["uid"] in writer.ragged:
            t["ragged_offset_uid"] = writer.ragged[t["uid"]]

    def name(dtype: DataType | None) -> str | None:
        return None if dtype is None else NAMES[dtype]

    context = {"name": graph.name, "io_data_type": name(graph.io_dtype),
               "intermediate_data_type": name(graph.intermediate_dtype), "compute_data_type": name(graph.compute_dtype),
               "sm_count": -1}  # fmt: skip
    doc = {"json_version": JSON_VERSION, "context": context, "tensors": writer.tensors, "nodes": writer.nodes}
    return json.dumps(doc).encode()
