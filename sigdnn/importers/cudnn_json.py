"""cuDNN-frontend graph JSON -> sigdnn graphs.

The format is what ``cudnn_frontend::graph::Graph::serialize(json&)`` writes
(``json_version`` "2.0"; NVIDIA/cudnn-frontend ``graph_interface.h``,
``graph_properties.h``, ``utils/serialize.h``): a ``context`` with the
graph's data types, ``tensors`` (uid, name, data_type, dim, stride,
is_virtual, is_pass_by_value, pass_by_value, reordering_type) and ``nodes``
(tag, name, compute_data_type, inputs and outputs as port -> uid, and the
op's attributes). As the frontend writes them, float attributes are the
hexadecimal bits of a float32 ("3F800000"; plain numbers are accepted too),
enums are their names, and a pass-by-value is ``{"index", "value"}`` over
(int64, int32, half, float, double, bfloat16).

Tags mapped: CONV_FPROP, CONV_DGRAD, CONV_WGRAD, POINTWISE, MATMUL,
REDUCTION, BATCHNORM, BATCHNORM_INFERENCE, DBN, LAYER_NORM,
LAYER_NORM_BPROP, RMS_NORM, RMS_NORM_BPROP, RESAMPLE (pooling modes),
RESHAPE, TRANSPOSE, SLICE, CONCATENATE, SDPA, SDPA_BWD. Any other tag is
collected into one error; a key a mapping does not understand, or a value
sigdnn cannot honour, is a GraphError naming the node. Device hints with no
effect on results are not carried: context ``sm_count``,
``is_dynamic_shape_enabled``, ``gid``, the version strings, tensor
``alignment``, reduction ``is_deterministic``, sdpa ``implementation``.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from typing import Any

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError, SchemaError, SigdnnError
from sigdnn.graph.arguments import integer, scalar_value
from sigdnn.graph.graph import Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.graph.tensor import Tensor
from sigdnn.importers.common import UnsupportedOps, add_op, refuse_unknown

JSON_VERSION = "2.0"
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
TOP_KEYS = {"gid", "context", "json_version", "cudnn_backend_version", "cudnn_frontend_version", "nodes", "tensors"}
CONTEXT_KEYS = {
    "compute_data_type",
    "intermediate_data_type",
    "io_data_type",
    "sm_count",
    "is_dynamic_shape_enabled",
    "is_override_shape_enabled",
    "name",
}
TENSOR_KEYS = {
    "data_type",
    "dim",
    "stride",
    "is_virtual",
    "pass_by_value",
    "is_pass_by_value",
    "reordering_type",
    "uid",
    "name",
    "alignment",
}
NODE_KEYS = {"tag", "name", "compute_data_type", "inputs", "outputs"}
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


def _dtype(v: Any, where: str) -> DataType | None:
    name = R.text(v, where)
    if name not in DATA_TYPES:
        raise GraphError(f"{where}: cuDNN data type {name!r} has no sigdnn data type")
    return DATA_TYPES[name]


class JsonImporter:
    def __init__(self, doc: Any, limits: Limits) -> None:
        self.doc = R.obj(doc, "cuDNN graph JSON")
        self.limits = limits
        self.unsupported = UnsupportedOps("cuDNN graph JSON", MAPPERS)

    def run(self) -> Graph:
        doc = self.doc
        version = doc.get("json_version")
        if version != JSON_VERSION:
            raise SchemaError(
                f"cuDNN graph JSON: json_version {version!r} is not supported (this reader: {JSON_VERSION!r})"
            )
        refuse_unknown("cuDNN graph JSON", doc, TOP_KEYS, "key")
        context = R.obj(doc.get("context", {}), "context")
        refuse_unknown("cuDNN graph JSON context", context, CONTEXT_KEYS, "key")
        if R.boolean(context.get("is_override_shape_enabled"), "context is_override_shape_enabled"):
            raise GraphError("cuDNN graph JSON: is_override_shape_enabled (execute-time shapes) is not supported")
        graph = Graph(
            R.text(context.get("name"), "context name") or "cudnn_graph",
            _dtype(context.get("io_data_type"), "context io_data_type"),
            _dtype(context.get("intermediate_data_type"), "context intermediate_data_type"),
            _dtype(context.get("compute_data_type"), "context compute_data_type"),
        )
        self.graph = graph
        tensors = R.array(doc.get("tensors", []), "tensors")
        nodes = R.array(doc.get("nodes", []), "nodes")
        if len(tensors) > self.limits.max_tensors or len(nodes) > self.limits.max_nodes:
            raise GraphError(
                f"cuDNN graph JSON declares {len(tensors)} tensors and {len(nodes)} nodes "
                f"(limits {self.limits.max_tensors}, {self.limits.max_nodes})"
            )
        for i, t in enumerate(tensors):
            tensor = self.tensor(t, i)
            if tensor.uid in graph.tensors:
                raise GraphError(f"duplicate tensor uid {tensor.uid}")
            graph.tensors[tensor.uid] = tensor
        for i, n in enumerate(nodes):
            self.node(n, i)
        if self.unsupported:
            raise self.unsupported.error()
        return graph

    def tensor(self, t: Any, index: int) -> Tensor:
        where = f"tensor #{index}"
        t = R.obj(t, where)
        uid = R.int_(t.get("uid"), f"{where} uid")
        name = R.text(t.get("name"), f"{where} name") or f"tensor_{uid}"
        where = f"tensor '{name}' (uid {uid})"
        refuse_unknown(where, t, TENSOR_KEYS, "key")
        if t.get("reordering_type") not in (None, "NONE"):
            raise GraphError(f"{where}: reordering_type {t.get('reordering_type')!r} is not supported")
        dtype = _dtype(t.get("data_type"), f"{where} data_type")
        dims = R.ints(t.get("dim"), f"{where} dim", self.limits.max_rank)
        strides = R.ints(t.get("stride"), f"{where} stride", self.limits.max_rank)
        if len(dims) != len(strides):
            raise GraphError(f"{where}: {len(dims)} dims but {len(strides)} strides")
        value = None
        if R.boolean(t.get("is_pass_by_value"), f"{where} is_pass_by_value"):
            value = self.pass_by_value(t.get("pass_by_value"), dtype, where)
        elif t.get("pass_by_value") is not None:
            raise GraphError(f"{where}: a pass_by_value on a tensor that is not pass-by-value")
        virtual = R.boolean(t.get("is_virtual"), f"{where} is_virtual")
        return Tensor(uid, name, dims, strides, dtype, virtual, value)

    def pass_by_value(self, v: Any, dtype: DataType | None, where: str) -> bytes:
        if v is None:
            raise GraphError(f"{where}: a pass-by-value tensor without its value (given at execute) is not supported")
        v = R.obj(v, f"{where} pass_by_value")
        index = R.int_(v.get("index"), f"{where} pass_by_value index")
        raw = v.get("value")
        if index in (0, 1):
            number: float | int = R.int_(raw, f"{where} pass_by_value")
        elif index in (2, 3, 5):
            number = R.real(raw, f"{where} pass_by_value")  # type: ignore[assignment]
        elif index == 4:
            if isinstance(raw, bool) or not isinstance(raw, (int, float)):
                raise SchemaError(f"{where}: pass_by_value double must be a number")
            number = float(raw)
        else:
            raise SchemaError(f"{where}: unknown pass_by_value index {index}")
        if dtype is None:
            raise GraphError(f"{where}: a pass-by-value tensor needs its data_type")
        exact = scalar_value(number, dtype, where)
        return exact.astype(dtype.numpy.newbyteorder("<")).tobytes()

    def node(self, n: Any, index: int) -> None:
        where = f"node #{index}"
        n = R.obj(n, where)
        name = R.text(n.get("name"), f"{where} name") or f"node_{index}"
        where = f"node '{name}'"
        tag = R.text(n.get("tag"), f"{where} tag", optional=False)
        if tag not in MAPPERS:
            self.unsupported.add(tag, name)
            return
        if self.unsupported:
            return
        MAPPERS[tag](NodeMapping(self, n, name, where, tag))


class NodeMapping:
    """One JSON node being mapped: ports by their cuDNN names, attributes (each read marked as handled)."""

    def __init__(self, importer: JsonImporter, n: dict[str, Any], name: str, where: str, tag: str) -> None:
        self.importer, self.n, self.name, self.where, self.tag = importer, n, name, f"{where} ({tag})", tag
        self.graph = importer.graph
        self.inputs = self.ports("inputs")
        self.outputs = self.ports("outputs")
        self.used_inputs: set[str] = set()
        self.used_outputs: set[str] = set()
        self.handled = set(NODE_KEYS)
        self.compute = _dtype(n.get("compute_data_type"), f"{self.where} compute_data_type")

    def ports(self, key: str) -> dict[str, int]:
        ports = R.obj(self.n.get(key, {}), f"{self.where} {key}")
        return {str(p): R.int_(u, f"{self.where} {key} {p}") for p, u in ports.items() if u is not None}

    def attr(self, key: str, default: Any = None) -> Any:
        self.handled.add(key)
        v = self.n.get(key, default)
        return default if v is None else v

    def real(self, key: str) -> float | None:
        return R.real(self.attr(key), f"{self.where} {key}")

    def ints(self, key: str) -> tuple[int, ...]:
        return R.ints(self.attr(key, []), f"{self.where} {key}", self.importer.limits.max_rank)

    def input(self, port: str, required: bool = True) -> int | None:
        self.used_inputs.add(port)
        if required and port not in self.inputs:
            raise GraphError(f"{self.where}: input port {port} is missing")
        return self.inputs.get(port)

    def output(self, port: str, required: bool = True) -> int | None:
        self.used_outputs.add(port)
        if required and port not in self.outputs:
            raise GraphError(f"{self.where}: output port {port} is missing")
        return self.outputs.get(port)

    def tensor(self, uid: int) -> Tensor:
        t = self.graph.tensors.get(uid)
        if t is None:
            raise GraphError(f"{self.where}: uid {uid} is not a tensor of the graph")
        return t

    def scalar(self, port: str, required: bool = True) -> float | None:
        uid = self.input(port, required)
        if uid is None:
            return None
        t = self.tensor(uid)
        if t.value is None:
            raise GraphError(f"{self.where}: port {port} tensor '{t.name}' must be pass-by-value (its value is taken)")
        return float(t.scalar())

    def refuse(self, why: str) -> GraphError:
        return GraphError(f"{self.where}: {why}")

    def add(self, kind: str, **fields: Any) -> None:
        refuse_unknown(self.where, self.n, self.handled, "key")
        refuse_unknown(self.where, self.inputs, self.used_inputs, "input port")
        refuse_unknown(self.where, self.outputs, self.used_outputs, "output port")
        add_op(self.graph, kind, self.name, self.compute, self.where, **fields)


Mapper = Callable[[NodeMapping], None]
MAPPERS: dict[str, Mapper] = {}


def maps(*tags: str) -> Callable[[Mapper], Mapper]:
    def register(fn: Mapper) -> Mapper:
        for tag in tags:
            MAPPERS[tag] = fn
        return fn

    return register


def _conv(m: NodeMapping, data_port: str) -> dict[str, Any]:
    mode = m.attr("math_mode", "CROSS_CORRELATION")
    if mode != "CROSS_CORRELATION":
        raise m.refuse(f"math_mode {mode!r}: sigdnn convolves by cross-correlation only")
    spatial = max(len(m.tensor(m.input(data_port)).dims) - 2, 0)  # type: ignore[arg-type]
    names = ("pre_padding", "post_padding", "stride", "dilation")
    return {n: m.ints(n) or (d,) * spatial for n, d in zip(names, (0, 0, 1, 1))}


@maps("CONV_FPROP")
def _conv_fprop(m: NodeMapping) -> None:
    conv = _conv(m, "X")
    m.add("conv_fprop", x=m.input("X"), w=m.input("W"), y=m.output("Y"), **conv)


@maps("CONV_DGRAD")
def _conv_dgrad(m: NodeMapping) -> None:
    conv = _conv(m, "DY")
    dx = m.output("DX")
    m.add("conv_dgrad", dy=m.input("DY"), w=m.input("W"), dx=dx, dims=m.tensor(dx).dims, **conv)  # type: ignore[arg-type]


@maps("CONV_WGRAD")
def _conv_wgrad(m: NodeMapping) -> None:
    conv = _conv(m, "X")
    dw = m.output("DW")
    m.add("conv_wgrad", x=m.input("X"), dy=m.input("DY"), dw=dw, dims=m.tensor(dw).dims, **conv)  # type: ignore[arg-type]


POINTWISE_PARAMS = (
    "relu_lower_clip",
    "relu_upper_clip",
    "relu_lower_clip_slope",
    "swish_beta",
    "elu_alpha",
    "softplus_beta",
)


@maps("POINTWISE")
def _pointwise(m: NodeMapping) -> None:
    mode = R.text(m.attr("mode"), f"{m.where} mode", optional=False)
    params = {p: m.real(p) for p in POINTWISE_PARAMS}
    axis = m.attr("axis")
    if axis is not None:
        params["axis"] = R.int_(axis, f"{m.where} axis")
    m.add(
        "pointwise",
        mode=mode.lower(),
        in_0=m.input("IN_0"),
        in_1=m.input("IN_1", False),
        in_2=m.input("IN_2", False),
        out_0=m.output("OUT_0"),
        **{k: v for k, v in params.items() if v is not None},
    )


@maps("MATMUL")
def _matmul(m: NodeMapping) -> None:
    if R.real(m.attr("padding_value", 0.0), f"{m.where} padding_value") != 0.0:
        raise m.refuse("padding_value (ragged matmul padding) is not supported")
    m.add("matmul", a=m.input("A"), b=m.input("B"), c=m.output("C"))


@maps("REDUCTION")
def _reduction(m: NodeMapping) -> None:
    mode = R.text(m.attr("mode"), f"{m.where} mode", optional=False)
    m.attr("is_deterministic")
    x, y = m.input("X"), m.output("Y")
    xd, yd = m.tensor(x).dims, m.tensor(y).dims  # type: ignore[arg-type]
    if len(xd) != len(yd) or any(b not in (1, a) for a, b in zip(xd, yd)):
        raise m.refuse(f"Y {list(yd)} is no reduction of X {list(xd)}")
    axes = tuple(i for i, (a, b) in enumerate(zip(xd, yd)) if b == 1 and a != 1)
    m.add("reduction", mode=mode.lower(), x=x, y=y, axes=axes)


def _no_peer_stats(m: NodeMapping) -> None:
    if R.array(m.attr("peer_stats", []), f"{m.where} peer_stats"):
        raise m.refuse("peer_stats (multi-GPU statistics) are not supported")


@maps("BATCHNORM")
def _batchnorm(m: NodeMapping) -> None:
    _no_peer_stats(m)
    running = m.input("PREV_RUNNING_MEAN", False)
    m.add(
        "batchnorm",
        x=m.input("X"),
        scale=m.input("SCALE"),
        bias=m.input("BIAS"),
        y=m.output("Y"),
        mean=m.output("MEAN"),
        inv_variance=m.output("INV_VARIANCE"),
        epsilon=m.scalar("EPSILON"),
        in_running_mean=running,
        in_running_var=m.input("PREV_RUNNING_VAR", False),
        next_running_mean=m.output("NEXT_RUNNING_MEAN", False),
        next_running_var=m.output("NEXT_RUNNING_VAR", False),
        momentum=m.scalar("MOMENTUM", False),
    )


@maps("BATCHNORM_INFERENCE")
def _batchnorm_inference(m: NodeMapping) -> None:
    m.add(
        "batchnorm_inference",
        x=m.input("X"),
        mean=m.input("MEAN"),
        inv_variance=m.input("INV_VARIANCE"),
        scale=m.input("SCALE"),
        bias=m.input("BIAS"),
        y=m.output("Y"),
    )


@maps("DBN")
def _batchnorm_backward(m: NodeMapping) -> None:
    _no_peer_stats(m)
    m.add(
        "batchnorm_backward",
        dy=m.input("DY"),
        x=m.input("X"),
        scale=m.input("SCALE"),
        mean=m.input("MEAN"),
        inv_variance=m.input("INV_VARIANCE"),
        dx=m.output("DX"),
        dscale=m.output("DSCALE"),
        dbias=m.output("DBIAS"),
    )


def _phase(m: NodeMapping, stats: bool) -> str:
    phase = m.attr("forward_phase")
    if phase not in (None, "TRAINING", "INFERENCE"):
        raise m.refuse(f"unknown forward_phase {phase!r}")
    return phase.lower() if phase else ("training" if stats else "inference")


@maps("LAYER_NORM")
def _layernorm(m: NodeMapping) -> None:
    mean = m.output("MEAN", False)
    m.add(
        "layernorm",
        phase=_phase(m, mean is not None),
        x=m.input("X"),
        scale=m.input("SCALE"),
        bias=m.input("BIAS"),
        y=m.output("Y"),
        mean=mean,
        inv_variance=m.output("INV_VARIANCE", False),
        epsilon=m.scalar("EPSILON"),
    )


@maps("LAYER_NORM_BPROP")
def _layernorm_backward(m: NodeMapping) -> None:
    m.input("EPSILON", False)  # the saved inv_variance already holds it
    m.add(
        "layernorm_backward",
        dy=m.input("DY"),
        x=m.input("X"),
        scale=m.input("SCALE"),
        mean=m.input("MEAN"),
        inv_variance=m.input("INV_VARIANCE"),
        dx=m.output("DX"),
        dscale=m.output("DSCALE"),
        dbias=m.output("DBIAS"),
    )


@maps("RMS_NORM")
def _rmsnorm(m: NodeMapping) -> None:
    inv = m.output("INV_VARIANCE", False)
    m.add(
        "rmsnorm",
        phase=_phase(m, inv is not None),
        x=m.input("X"),
        scale=m.input("SCALE"),
        bias=m.input("BIAS", False),
        y=m.output("Y"),
        inv_variance=inv,
        epsilon=m.scalar("EPSILON"),
    )


@maps("RMS_NORM_BPROP")
def _rmsnorm_backward(m: NodeMapping) -> None:
    dbias = m.output("DBIAS", False)
    m.add(
        "rmsnorm_backward",
        dy=m.input("DY"),
        x=m.input("X"),
        scale=m.input("SCALE"),
        inv_variance=m.input("INV_VARIANCE"),
        dx=m.output("DX"),
        dscale=m.output("DSCALE"),
        dbias=dbias,
        has_dbias=dbias is not None,
    )


RESAMPLE_POOLING = {
    "MAXPOOL": "max",
    "AVGPOOL_INCLUDE_PADDING": "average_count_include_pad",
    "AVGPOOL_EXCLUDE_PADDING": "average_count_exclude_pad",
}


@maps("RESAMPLE")
def _resample(m: NodeMapping) -> None:
    mode = m.attr("resample_mode")
    if mode not in RESAMPLE_POOLING:
        raise m.refuse(f"resample_mode {mode!r}: only the pooling modes {sorted(RESAMPLE_POOLING)} are mapped")
    mode = RESAMPLE_POOLING[mode]
    if R.boolean(m.attr("generate_index"), f"{m.where} generate_index") or m.output("Index", False) is not None:
        raise m.refuse("the max-pooling Index output is not supported")
    pre, post, stride, window = (m.ints(k) for k in ("pre_padding", "post_padding", "stride", "window"))
    padding = m.attr("padding_mode")
    expected = "NEG_INF_PAD" if mode == "max" else "ZERO_PAD"
    if (any(pre) or any(post)) and padding not in (None, expected):
        raise m.refuse(f"padding_mode {padding!r} with {mode} pooling is not supported")
    m.add(
        "pooling",
        mode=mode,
        x=m.input("X"),
        y=m.output("Y"),
        window=window,
        pre_padding=pre,
        post_padding=post,
        stride=stride,
    )


def _packed(t: Tensor) -> bool:
    expect = 1
    for d, s in zip(reversed(t.dims), reversed(t.strides)):
        if d != 1 and s != expect:
            return False
        expect *= d
    return True


@maps("RESHAPE")
def _reshape(m: NodeMapping) -> None:
    x, y = m.input("X"), m.output("Y")
    mode = m.attr("reshape_mode", "VIEW_ONLY")
    m.attr("dim")
    m.attr("stride")
    tx, ty = m.tensor(x), m.tensor(y)  # type: ignore[arg-type]
    if mode not in ("VIEW_ONLY", "LOGICAL"):
        raise m.refuse(f"unknown reshape_mode {mode!r}")
    if mode == "VIEW_ONLY" and not (_packed(tx) and _packed(ty)):
        raise m.refuse("a VIEW_ONLY reshape of non-row-major strides reinterprets memory; sigdnn reshapes logically")
    m.add("reshape", x=x, y=y, dims=ty.dims)


@maps("TRANSPOSE")
def _transpose(m: NodeMapping) -> None:
    m.add("transpose", x=m.input("X"), y=m.output("Y"), permutation=m.ints("permutation"))


@maps("SLICE")
def _slice(m: NodeMapping) -> None:
    x = m.input("X")
    dims = m.tensor(x).dims  # type: ignore[arg-type]
    pairs = R.array(m.attr("slices", []), f"{m.where} slices")
    if len(pairs) > len(dims):
        raise m.refuse(f"{len(pairs)} slices for rank {len(dims)}")
    bounds = [R.ints(p, f"{m.where} slices", 2) for p in pairs]
    if any(len(b) != 2 for b in bounds):
        raise m.refuse("each slice is a [start, end] pair")
    steps = m.ints("slice_strides") or (1,)
    if len(steps) == 1:
        steps = steps * len(dims)
    if len(steps) != len(dims):
        raise m.refuse(f"slice_strides {list(steps)} for rank {len(dims)}")
    start = tuple(b[0] for b in bounds) + (0,) * (len(dims) - len(bounds))
    limit = tuple(b[1] for b in bounds) + dims[len(bounds) :]
    m.add("slice", x=x, y=m.output("Y"), start_indices=start, limit_indices=limit, strides=steps)


@maps("CONCATENATE")
def _concatenate(m: NodeMapping) -> None:
    if m.attr("in_place_index") is not None:
        raise m.refuse("in_place_index is not supported")
    count = len(m.inputs)
    xs = tuple(m.input(str(i)) for i in range(count))
    axis = R.int_(m.attr("axis"), f"{m.where} axis")
    m.add("concatenate", x=xs, y=m.output("Y"), axis=axis)


def _attention(m: NodeMapping, q: int, k: int) -> tuple[float, bool]:
    scale_value = m.real("attn_scale_value")
    scale_tensor = m.scalar("Attn_scale", False)
    if scale_value is not None and scale_tensor is not None:
        raise m.refuse("give the attention scale as a tensor or a value, not both")
    scale = scale_tensor if scale_tensor is not None else (1.0 if scale_value is None else scale_value)
    for flag in ("alibi_mask", "padding_mask"):
        if R.boolean(m.attr(flag), f"{m.where} {flag}"):
            raise m.refuse(f"{flag} is not supported")
    if m.real("dropout_probability") not in (None, 0.0):
        raise m.refuse("dropout is not supported")
    left, right = m.attr("left_bound"), m.attr("right_bound")
    align = m.attr("diagonal_alignment", "TOP_LEFT")
    if left is not None:
        raise m.refuse("a sliding window (left_bound) is not supported")
    if right is not None and R.int_(right, f"{m.where} right_bound") != 0:
        raise m.refuse(f"right_bound {right}: only the causal band (0) is supported")
    if align not in ("TOP_LEFT", "BOTTOM_RIGHT"):
        raise m.refuse(f"unknown diagonal_alignment {align!r}")
    if right is not None and align == "BOTTOM_RIGHT" and m.tensor(q).dims[2] != m.tensor(k).dims[2]:
        raise m.refuse("a bottom-right causal mask with Sq != Skv is not supported (sigdnn's is top-left)")
    for hint in ("max_total_seq_len_q", "max_total_seq_len_kv", "max_seq_len_kv"):
        if m.attr(hint) is not None:
            raise m.refuse(f"{hint} (ragged / paged attention) is not supported")
    return float(scale), right is not None


@maps("SDPA")
def _sdpa(m: NodeMapping) -> None:
    q, k = m.input("Q"), m.input("K")
    scale, causal = _attention(m, q, k)  # type: ignore[arg-type]
    stats = m.output("Stats", False)
    generate = m.attr("generate_stats")
    if generate is not None and R.boolean(generate, f"{m.where} generate_stats") != (stats is not None):
        raise m.refuse("generate_stats disagrees with the presence of the Stats output")
    if R.boolean(m.attr("stats_use_log2"), f"{m.where} stats_use_log2"):
        raise m.refuse("stats_use_log2 is not supported (sigdnn's stats are natural-log)")
    if m.attr("mma_core_mode") not in (None,):
        raise m.refuse("mma_core_mode (fp8 attention) is not supported")
    m.attr("implementation")
    m.add(
        "sdpa",
        q=q,
        k=k,
        v=m.input("V"),
        o=m.output("O"),
        bias=m.input("Bias", False),
        stats=stats,
        attn_scale=scale,
        use_causal_mask=causal,
        generate_stats=stats is not None,
    )


@maps("SDPA_BWD")
def _sdpa_backward(m: NodeMapping) -> None:
    q, k = m.input("Q"), m.input("K")
    scale, causal = _attention(m, q, k)  # type: ignore[arg-type]
    m.attr("is_deterministic_algorithm")  # the reference is deterministic whatever is asked
    m.add(
        "sdpa_backward",
        q=q,
        k=k,
        v=m.input("V"),
        o=m.input("O"),
        d_o=m.input("dO"),
        stats=m.input("Stats"),
        dq=m.output("dQ"),
        dk=m.output("dK"),
        dv=m.output("dV"),
        bias=m.input("Bias", False),
        attn_scale=scale,
        use_causal_mask=causal,
    )


def load(data: bytes | str | Any, *, limits: Limits = DEFAULT_LIMITS) -> Graph:
    """cuDNN-frontend graph JSON (bytes, text or the parsed object) as a checked sigdnn Graph."""
    from sigdnn.graph.checks import check_graph

    doc = data
    if isinstance(data, (bytes, bytearray, memoryview, str)):
        try:
            doc = json.loads(bytes(data) if not isinstance(data, str) else data)
        except (ValueError, RecursionError) as e:
            raise SchemaError(f"not cuDNN graph JSON: {type(e).__name__}: {e}") from None
    try:
        graph = JsonImporter(doc, limits).run()
    except SigdnnError:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        raise SchemaError(f"malformed cuDNN graph JSON: {type(e).__name__}: {e}") from None
    check_graph(graph, limits)
    return graph


def to_sdg(data: bytes) -> bytes:
    """cuDNN graph JSON bytes -> sigdnn graph bytes (the GraphFormat hook of ``sigdnn.io``)."""
    return load(data).serialize()
