"""hipDNN serialized graphs (FlatBuffers) -> sigdnn graphs.

The specification is hipDNN's published schema, rocm-libraries
``projects/hipdnn/flatbuffers_sdk/schemas`` (namespace
``hipdnn_flatbuffers_sdk.data_objects``): ``graph.fbs`` with its 23-member
``NodeAttributes`` union, ``tensor_attributes.fbs``, ``data_types.fbs`` and
the attribute tables. Slot numbers below are the field positions in those
tables (a union field takes two slots: its type, then its value). This is
the layout the ``data_sdk`` schemas already had for Graph, Node, tensors and
the pointwise / batchnorm / convolution / matmul tables; the oldest
``hipdnn_sdk`` schema (Node without ``compute_data_type``) is recognized
and refused. hipDNN declares no file_identifier and no schema version, so
the reader relies on the layout alone and checks every field it reads.

Read with sigdnn's bounds-checked FlatBuffers reader: malformed bytes are a
SchemaError, a well-formed graph sigdnn cannot express a GraphError naming
the node and field. Metadata with no effect on results is not carried
(Graph ``preferred_engine_id`` names a hipDNN engine; ``id``,
``min_required_engine_api_version``, tensor ``alignment``, reduction
``is_deterministic``, sdpa ``implementation``, the ``umd_flops`` /
``umd_bytes`` cost strings); every other field that is set and not mapped
is refused.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Any

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError, SchemaError, SigdnnError
from sigdnn.graph.arguments import scalar_value
from sigdnn.graph.graph import Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.wire_reader import Buffer, Table
from sigdnn.importers.common import UnsupportedOps, add_op

SCHEMA = "hipDNN flatbuffers_sdk (hipdnn_flatbuffers_sdk.data_objects)"

# data_types.fbs: DataType
DATA_TYPES: dict[int, DataType | None] = {
    0: None,
    1: DataType.FLOAT32,
    2: DataType.FLOAT16,
    3: DataType.BFLOAT16,
    4: DataType.FLOAT64,
    5: DataType.UINT8,
    6: DataType.INT32,
    7: DataType.INT8,
    8: DataType.FP8_E4M3,
    9: DataType.FP8_E5M2,
    15: DataType.INT64,
}
DATA_TYPE_NAMES = {
    10: "FP8_E8M0",
    11: "FP4_E2M1",
    12: "FP6_E2M3",
    13: "FP6_E3M2",
    14: "INT4",
    16: "FP8_E4M3_FNUZ",
    17: "FP8_E5M2_FNUZ",
}

# graph.fbs: union NodeAttributes, in order (member = position + 1)
NODE_TABLES = (
    "BatchnormInferenceAttributes",
    "PointwiseAttributes",
    "BatchnormBackwardAttributes",
    "BatchnormAttributes",
    "ConvolutionFwdAttributes",
    "ConvolutionBwdAttributes",
    "ConvolutionWrwAttributes",
    "BatchnormInferenceAttributesVarianceExt",
    "MatmulAttributes",
    "RMSNormAttributes",
    "LayernormAttributes",
    "SdpaAttributes",
    "BlockScaleDequantizeAttributes",
    "BlockScaleQuantizeAttributes",
    "SdpaBackwardAttributes",
    "CustomOpAttributes",
    "RMSNormBackwardAttributes",
    "ReductionAttributes",
    "ResampleFwdAttributes",
    "LayernormBackwardAttributes",
    "ResampleBwdAttributes",
    "MoeGroupedMatmulAttributes",
    "MoeGroupedMatmulBwdAttributes",
)

# Field names of each mapped table in slot order; (name, kind). Kinds: "uid" long,
# "uid?" optional long, "long?", "f32?" optional float, "i32?", "bool", "bool?", "u8" enum,
# "i64[]" vector of long, "str" string (metadata).
FIELDS: dict[str, tuple[tuple[str, str], ...]] = {
    "Graph": (
        ("name", "str"),
        ("compute_data_type", "u8"),
        ("intermediate_data_type", "u8"),
        ("io_data_type", "u8"),
        ("tensors", "tables"),
        ("nodes", "tables"),
        ("preferred_engine_id", "long?"),
        ("is_override_shape_enabled", "bool"),
        ("min_required_engine_api_version", "struct"),
        ("id", "struct"),
    ),
    "TensorAttributes": (
        ("uid", "long"),
        ("name", "str"),
        ("data_type", "u8"),
        ("strides", "i64[]"),
        ("dims", "i64[]"),
        ("virtual", "bool"),
        ("value_type", "u8"),
        ("value", "offset"),
        ("is_runtime_pass_by_value", "bool"),
        ("ragged_offset_tensor_uid", "long?"),
        ("alignment", "long"),
        ("ragged_offset_multiplier", "long"),
    ),
    "Node": (("name", "str"), ("compute_data_type", "u8"), ("attributes_type", "u8"), ("attributes", "offset")),
    "BatchnormInferenceAttributes": (
        ("x", "uid"),
        ("mean", "uid"),
        ("inv_variance", "uid"),
        ("scale", "uid"),
        ("bias", "uid"),
        ("y", "uid"),
    ),
    "PointwiseAttributes": (
        ("operation", "u8"),
        ("relu_lower_clip", "f32?"),
        ("relu_upper_clip", "f32?"),
        ("relu_lower_clip_slope", "f32?"),
        ("axis", "long?"),
        ("in_0", "uid"),
        ("in_1", "uid?"),
        ("in_2", "uid?"),
        ("out_0", "uid"),
        ("swish_beta", "f32?"),
        ("elu_alpha", "f32?"),
        ("softplus_beta", "f32?"),
    ),
    "BatchnormBackwardAttributes": (
        ("dy", "uid"),
        ("x", "uid"),
        ("mean", "uid?"),
        ("inv_variance", "uid?"),
        ("scale", "uid"),
        ("peer_stats", "i64[]"),
        ("dx", "uid"),
        ("dscale", "uid"),
        ("dbias", "uid"),
    ),
    "BatchnormAttributes": (
        ("x", "uid"),
        ("scale", "uid"),
        ("bias", "uid"),
        ("epsilon", "uid"),
        ("peer_stats", "i64[]"),
        ("prev_running_mean", "uid?"),
        ("prev_running_variance", "uid?"),
        ("momentum", "uid?"),
        ("y", "uid"),
        ("mean", "uid?"),
        ("inv_variance", "uid?"),
        ("next_running_mean", "uid?"),
        ("next_running_variance", "uid?"),
    ),
    "ConvolutionFwdAttributes": (
        ("x", "uid"),
        ("w", "uid"),
        ("y", "uid"),
        ("pre_padding", "i64[]"),
        ("post_padding", "i64[]"),
        ("stride", "i64[]"),
        ("dilation", "i64[]"),
        ("conv_mode", "u8"),
        ("umd_flops", "str"),
        ("umd_bytes", "str"),
    ),
    "ConvolutionBwdAttributes": (
        ("dy", "uid"),
        ("w", "uid"),
        ("dx", "uid"),
        ("pre_padding", "i64[]"),
        ("post_padding", "i64[]"),
        ("stride", "i64[]"),
        ("dilation", "i64[]"),
        ("conv_mode", "u8"),
        ("umd_flops", "str"),
        ("umd_bytes", "str"),
    ),
    "ConvolutionWrwAttributes": (
        ("x", "uid"),
        ("dy", "uid"),
        ("dw", "uid"),
        ("pre_padding", "i64[]"),
        ("post_padding", "i64[]"),
        ("stride", "i64[]"),
        ("dilation", "i64[]"),
        ("conv_mode", "u8"),
        ("umd_flops", "str"),
        ("umd_bytes", "str"),
    ),
    "BatchnormInferenceAttributesVarianceExt": (
        ("x", "uid"),
        ("mean", "uid"),
        ("variance", "uid"),
        ("scale", "uid"),
        ("bias", "uid"),
        ("y", "uid"),
        ("epsilon", "uid"),
    ),
    "MatmulAttributes": (("a", "uid"), ("b", "uid"), ("c", "uid"), ("umd_flops", "str"), ("umd_bytes", "str")),
    "RMSNormAttributes": (
        ("x", "uid"),
        ("scale", "uid"),
        ("epsilon", "uid"),
        ("y", "uid"),
        ("bias", "uid?"),
        ("inv_rms", "uid?"),
        ("forward_phase", "u8"),
    ),
    "LayernormAttributes": (
        ("x", "uid"),
        ("scale", "uid"),
        ("bias", "uid"),
        ("epsilon", "uid"),
        ("y", "uid"),
        ("normalized_dim_count", "long"),
        ("mean", "uid?"),
        ("inv_variance", "uid?"),
        ("forward_phase", "u8"),
    ),
    "SdpaAttributes": (
        ("q", "uid"),
        ("k", "uid"),
        ("v", "uid"),
        ("o", "uid"),
        ("attn_mask", "uid?"),
        ("scale", "uid?"),
        ("seq_len_q", "uid?"),
        ("seq_len_kv", "uid?"),
        ("seed", "uid?"),
        ("offset", "uid?"),
        ("dropout_mask", "uid?"),
        ("dropout_scale", "uid?"),
        ("page_table_k", "uid?"),
        ("page_table_v", "uid?"),
        ("block_mask", "uid?"),
        ("sink_token", "uid?"),
        ("descale_q", "uid?"),
        ("descale_k", "uid?"),
        ("descale_v", "uid?"),
        ("descale_s", "uid?"),
        ("scale_s", "uid?"),
        ("scale_o", "uid?"),
        ("stats", "uid?"),
        ("max", "uid?"),
        ("sum_exp", "uid?"),
        ("rng_dump", "uid?"),
        ("amax_s", "uid?"),
        ("amax_o", "uid?"),
        ("generate_stats", "bool?"),
        ("alibi_mask", "bool"),
        ("padding_mask", "bool"),
        ("causal_mask", "bool"),
        ("causal_mask_bottom_right", "bool"),
        ("dropout_probability", "f32?"),
        ("attn_scale_value", "f32?"),
        ("left_bound", "long?"),
        ("right_bound", "long?"),
        ("max_seq_len_kv", "i32?"),
        ("diagonal_alignment", "u8"),
        ("mma_core_mode", "u8"),
        ("implementation", "u8"),
        ("umd_flops", "str"),
        ("umd_bytes", "str"),
    ),
    "SdpaBackwardAttributes": (
        ("q", "uid"),
        ("k", "uid"),
        ("v", "uid"),
        ("o", "uid"),
        ("do", "uid"),
        ("stats", "uid"),
        ("dq", "uid"),
        ("dk", "uid"),
        ("dv", "uid"),
        ("scale", "uid?"),
        ("attn_mask", "uid?"),
        ("seq_len_q", "uid?"),
        ("seq_len_kv", "uid?"),
        ("seed", "uid?"),
        ("offset", "uid?"),
        ("dropout_mask", "uid?"),
        ("dropout_scale", "uid?"),
        ("dropout_scale_inv", "uid?"),
        ("dbias", "uid?"),
        ("alibi_mask", "bool"),
        ("padding_mask", "bool"),
        ("causal_mask", "bool"),
        ("causal_mask_bottom_right", "bool"),
        ("dropout_probability", "f32?"),
        ("attn_scale_value", "f32?"),
        ("left_bound", "long?"),
        ("right_bound", "long?"),
        ("diagonal_alignment", "u8"),
    ),
    "RMSNormBackwardAttributes": (
        ("dy", "uid"),
        ("x", "uid"),
        ("scale", "uid"),
        ("inv_rms", "uid"),
        ("dx", "uid"),
        ("dscale", "uid"),
        ("dbias", "uid?"),
    ),
    "ReductionAttributes": (("mode", "u8"), ("in", "uid"), ("out", "uid"), ("is_deterministic", "bool")),
    "ResampleFwdAttributes": (
        ("x", "uid"),
        ("y", "uid"),
        ("index", "uid?"),
        ("pre_padding", "i64[]"),
        ("post_padding", "i64[]"),
        ("stride", "i64[]"),
        ("window", "i64[]"),
        ("resample_mode", "u8"),
        ("padding_mode", "u8"),
        ("generate_index", "bool?"),
    ),
    "LayernormBackwardAttributes": (
        ("dy", "uid"),
        ("x", "uid"),
        ("scale", "uid"),
        ("mean", "uid?"),
        ("inv_variance", "uid?"),
        ("epsilon", "uid?"),
        ("dx", "uid"),
        ("dscale", "uid"),
        ("dbias", "uid"),
        ("normalized_dim_count", "long"),
    ),
}

# pointwise_attributes.fbs: PointwiseMode (value -> sigdnn mode); MAX_OP / MIN_OP are max / min
POINTWISE_MODES = {
    1: "abs",
    2: "add",
    3: "add_square",
    4: "binary_select",
    5: "ceil",
    6: "cmp_eq",
    7: "cmp_ge",
    8: "cmp_gt",
    9: "cmp_le",
    10: "cmp_lt",
    11: "cmp_neq",
    12: "div",
    13: "elu_bwd",
    14: "elu_fwd",
    15: "erf",
    16: "exp",
    17: "floor",
    18: "gelu_approx_tanh_bwd",
    19: "gelu_approx_tanh_fwd",
    20: "gelu_bwd",
    21: "gelu_fwd",
    22: "gen_index",
    23: "identity",
    24: "log",
    25: "logical_and",
    26: "logical_not",
    27: "logical_or",
    28: "max",
    29: "min",
    30: "mul",
    31: "neg",
    32: "reciprocal",
    33: "relu_bwd",
    34: "relu_fwd",
    35: "rsqrt",
    36: "sigmoid_bwd",
    37: "sigmoid_fwd",
    38: "sin",
    39: "softplus_bwd",
    40: "softplus_fwd",
    41: "sqrt",
    42: "sub",
    43: "swish_bwd",
    44: "swish_fwd",
    45: "tan",
    46: "tanh_bwd",
    47: "tanh_fwd",
}
REDUCTION_MODES = {
    1: "add",
    2: "mul",
    3: "min",
    4: "max",
    5: "amax",
    6: "avg",
    7: "norm1",
    8: "norm2",
    9: "mul_no_zeros",
}
CONV_MODES = {0: "UNSET", 1: "CONVOLUTION", 2: "CROSS_CORRELATION"}
NORM_PHASES = {0: None, 1: "inference", 2: "training"}
RESAMPLE_MODES = {1: "max", 2: "average_count_exclude_pad", 3: "average_count_include_pad"}
PADDING_MODES = {0: "PADDING_NOT_SET", 1: "NEG_INF_PAD", 2: "ZERO_PAD"}
# tensor_attributes.fbs: union TensorValue (member -> struct format); members 6 and 7 are both 8 bytes
# and swapped places between schema revisions, so the tensor's data_type decides how to read them.
TENSOR_VALUES = {1: "<f", 2: "<f", 3: "<f", 4: "<B", 5: "<i", 6: "<8", 7: "<8", 8: "<?"}
METADATA = {"umd_flops", "umd_bytes", "is_deterministic", "implementation"}

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
        return graph

    def tensor(self, pos: int, index: int) -> Tensor:
        where = f"hipDNN tensor #{index}"
        t = _read(self.buf, Table(self.buf, pos), "TensorAttributes", self.limits)
        where = f"hipDNN tensor '{t['name'] or ''}' (uid {t['uid']})"
        dtype = self.dtype(t["data_type"], where)
        if t["ragged_offset_tensor_uid"] is not None or t["ragged_offset_multiplier"] not in (0, 1):
            raise GraphError(f"{where}: ragged (packed) tensors are not supported")
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


class NodeMapping:
    """One hipDNN node being mapped: its fields, which of them were used, helpers to read pass-by-value tensors."""

    def __init__(
        self, reader: HipdnnReader, name: str, where: str, compute: DataType | None, table: str, fields: dict[str, Any]
    ) -> None:
        self.reader, self.name, self.where, self.compute, self.table = reader, name, where, compute, table
        self.fields, self.used = fields, set(METADATA)
        self.graph = reader.graph

    def get(self, *names: str) -> Any:
        self.used.update(names)
        return self.fields[names[0]] if len(names) == 1 else tuple(self.fields[n] for n in names)

    def scalar(self, field: str) -> float:
        """The value of the pass-by-value tensor a field names (cuDNN / hipDNN pass epsilon, momentum, ... so)."""
        uid = self.get(field)
        t = self.graph.tensors.get(uid)
        if t is None:
            raise GraphError(f"{self.where}: {field} names uid {uid}, which is not a tensor of the graph")
        if t.value is None:
            raise GraphError(f"{self.where}: {field} tensor '{t.name}' must be pass-by-value (sigdnn takes its value)")
        return float(t.scalar())

    def refuse(self, why: str) -> GraphError:
        return GraphError(f"{self.where} ({self.table}): {why}")

    def add(self, kind: str, **fields: Any) -> None:
        self.refuse_unused()
        add_op(self.graph, kind, self.name, self.compute, self.where, **fields)

    def refuse_unused(self) -> None:
        defaults = {"bool": False, "u8": 0, "i64[]": (), "str": None}
        kinds = dict(FIELDS[self.table])
        set_but_unused = [
            f for f, v in self.fields.items() if f not in self.used and v is not None and v != defaults.get(kinds[f])
        ]
        if set_but_unused:
            raise self.refuse(f"field(s) {sorted(set_but_unused)} are set; sigdnn does not support them")


Mapper = Callable[[NodeMapping], None]
MAPPERS: dict[str, Mapper] = {}


def maps(table: str) -> Callable[[Mapper], Mapper]:
    def register(fn: Mapper) -> Mapper:
        MAPPERS[table] = fn
        return fn

    return register


@maps("BatchnormInferenceAttributes")
def _batchnorm_inference(m: NodeMapping) -> None:
    m.add(
        "batchnorm_inference",
        **dict(
            zip(
                ("x", "mean", "inv_variance", "scale", "bias", "y"),
                m.get("x", "mean", "inv_variance", "scale", "bias", "y"),
            )
        ),
    )


@maps("BatchnormInferenceAttributesVarianceExt")
def _batchnorm_inference_variance(m: NodeMapping) -> None:
    """inv_variance = rsqrt(variance + epsilon) as two pointwise nodes, then batchnorm_inference."""
    x, mean, var, scale, bias, y = m.get("x", "mean", "variance", "scale", "bias", "y")
    eps_uid = m.get("epsilon")
    m.refuse_unused()
    t = {u: m.graph.tensors.get(u) for u in (var, eps_uid)}
    if None in t.values():
        raise m.refuse("variance / epsilon name no tensor of the graph")
    shifted = m.graph.pointwise("add", t[var], t[eps_uid], name=f"{m.name}/variance_plus_epsilon")
    inv = m.graph.pointwise("rsqrt", shifted, name=f"{m.name}/inv_variance")
    m.add("batchnorm_inference", x=x, mean=mean, inv_variance=inv.uid, scale=scale, bias=bias, y=y)


@maps("PointwiseAttributes")
def _pointwise(m: NodeMapping) -> None:
    op = m.get("operation")
    mode = POINTWISE_MODES.get(op)
    if mode is None:
        raise m.refuse(f"unknown or unset pointwise operation {op}")
    params = {
        p: m.get(p)
        for p in (
            "relu_lower_clip",
            "relu_upper_clip",
            "relu_lower_clip_slope",
            "swish_beta",
            "elu_alpha",
            "softplus_beta",
            "axis",
        )
    }
    ports = dict(zip(("in_0", "in_1", "in_2", "out_0"), m.get("in_0", "in_1", "in_2", "out_0")))
    m.add("pointwise", mode=mode, **ports, **{k: v for k, v in params.items() if v is not None})


@maps("BatchnormBackwardAttributes")
def _batchnorm_backward(m: NodeMapping) -> None:
    if m.get("peer_stats"):
        raise m.refuse("peer_stats (multi-GPU statistics) are not supported")
    names = ("dy", "x", "scale", "mean", "inv_variance", "dx", "dscale", "dbias")
    ports = dict(zip(names, m.get(*names)))
    if ports["mean"] is None or ports["inv_variance"] is None:
        raise m.refuse("sigdnn's batchnorm_backward needs the saved mean and inv_variance")
    m.add("batchnorm_backward", **ports)


@maps("BatchnormAttributes")
def _batchnorm(m: NodeMapping) -> None:
    if m.get("peer_stats"):
        raise m.refuse("peer_stats (multi-GPU statistics) are not supported")
    x, scale, bias, y, mean, inv = m.get("x", "scale", "bias", "y", "mean", "inv_variance")
    run_mean, run_var, next_mean, next_var = m.get(
        "prev_running_mean", "prev_running_variance", "next_running_mean", "next_running_variance"
    )
    if mean is None or inv is None:
        raise m.refuse("sigdnn's training batchnorm writes mean and inv_variance: both must be present")
    momentum = m.scalar("momentum") if m.fields["momentum"] is not None else None
    m.used.add("momentum")
    m.add(
        "batchnorm",
        x=x,
        scale=scale,
        bias=bias,
        y=y,
        mean=mean,
        inv_variance=inv,
        epsilon=m.scalar("epsilon"),
        in_running_mean=run_mean,
        in_running_var=run_var,
        next_running_mean=next_mean,
        next_running_var=next_var,
        momentum=momentum,
    )


def _conv_common(m: NodeMapping, data_port: str) -> dict[str, Any]:
    """Padding, stride, dilation (an absent vector is its default: 0 padding, stride and dilation 1)."""
    mode = m.get("conv_mode")
    if mode == 1:
        raise m.refuse("conv_mode CONVOLUTION (flipped kernel) is not supported; sigdnn convolves by cross-correlation")
    if mode not in CONV_MODES:
        raise m.refuse(f"unknown conv_mode {mode}")
    spatial = max(len(_dims(m, m.fields[data_port])) - 2, 0)
    names = ("pre_padding", "post_padding", "stride", "dilation")
    return {n: v or (d,) * spatial for n, v, d in zip(names, m.get(*names), (0, 0, 1, 1))}


def _dims(m: NodeMapping, uid: int) -> tuple[int, ...]:
    t = m.graph.tensors.get(uid)
    if t is None:
        raise m.refuse(f"uid {uid} is not a tensor of the graph")
    return t.dims


@maps("ConvolutionFwdAttributes")
def _conv_fprop(m: NodeMapping) -> None:
    conv = _conv_common(m, "x")
    m.add("conv_fprop", **dict(zip(("x", "w", "y"), m.get("x", "w", "y"))), **conv)


@maps("ConvolutionBwdAttributes")
def _conv_dgrad(m: NodeMapping) -> None:
    conv = _conv_common(m, "dy")
    dy, w, dx = m.get("dy", "w", "dx")
    m.add("conv_dgrad", dy=dy, w=w, dx=dx, dims=_dims(m, dx), **conv)


@maps("ConvolutionWrwAttributes")
def _conv_wgrad(m: NodeMapping) -> None:
    conv = _conv_common(m, "x")
    x, dy, dw = m.get("x", "dy", "dw")
    m.add("conv_wgrad", x=x, dy=dy, dw=dw, dims=_dims(m, dw), **conv)


@maps("MatmulAttributes")
def _matmul(m: NodeMapping) -> None:
    m.add("matmul", **dict(zip(("a", "b", "c"), m.get("a", "b", "c"))))


def _phase(m: NodeMapping, stats_present: bool) -> str:
    phase = NORM_PHASES.get(m.get("forward_phase"), "?")
    if phase == "?":
        raise m.refuse(f"unknown forward_phase {m.fields['forward_phase']}")
    return phase or ("training" if stats_present else "inference")


@maps("RMSNormAttributes")
def _rmsnorm(m: NodeMapping) -> None:
    x, scale, y, bias, inv = m.get("x", "scale", "y", "bias", "inv_rms")
    m.add(
        "rmsnorm",
        phase=_phase(m, inv is not None),
        x=x,
        scale=scale,
        y=y,
        bias=bias,
        inv_variance=inv,
        epsilon=m.scalar("epsilon"),
    )


def _check_normalized(m: NodeMapping, x: int, scale: int) -> None:
    """hipDNN counts the normalized (trailing) dims; sigdnn reads them off the scale: they must agree."""
    count = m.get("normalized_dim_count")
    xd, sd = _dims(m, x), _dims(m, scale)
    if len(xd) != len(sd):
        raise m.refuse(f"scale {list(sd)} must have x's rank {len(xd)}")
    from_scale = {i for i, (a, b) in enumerate(zip(xd, sd)) if a == b and a > 1}
    from_count = {i for i in range(len(xd) - count, len(xd)) if xd[i] > 1}
    if count < 0 or count > len(xd) or from_scale != from_count:
        raise m.refuse(f"normalized_dim_count {count} disagrees with scale {list(sd)} over x {list(xd)}")


@maps("LayernormAttributes")
def _layernorm(m: NodeMapping) -> None:
    x, scale, bias, y, mean, inv = m.get("x", "scale", "bias", "y", "mean", "inv_variance")
    _check_normalized(m, x, scale)
    m.add(
        "layernorm",
        phase=_phase(m, mean is not None),
        x=x,
        scale=scale,
        bias=bias,
        y=y,
        mean=mean,
        inv_variance=inv,
        epsilon=m.scalar("epsilon"),
    )


@maps("LayernormBackwardAttributes")
def _layernorm_backward(m: NodeMapping) -> None:
    names = ("dy", "x", "scale", "mean", "inv_variance", "dx", "dscale", "dbias")
    ports = dict(zip(names, m.get(*names)))
    m.used.add("epsilon")  # the saved inv_variance already holds it
    if ports["mean"] is None or ports["inv_variance"] is None:
        raise m.refuse("sigdnn's layernorm_backward needs the saved mean and inv_variance")
    _check_normalized(m, ports["x"], ports["scale"])
    m.add("layernorm_backward", **ports)


@maps("RMSNormBackwardAttributes")
def _rmsnorm_backward(m: NodeMapping) -> None:
    dy, x, scale, inv, dx, dscale, dbias = m.get("dy", "x", "scale", "inv_rms", "dx", "dscale", "dbias")
    m.add(
        "rmsnorm_backward",
        dy=dy,
        x=x,
        scale=scale,
        inv_variance=inv,
        dx=dx,
        dscale=dscale,
        dbias=dbias,
        has_dbias=dbias is not None,
    )


def _attention_options(m: NodeMapping, q: int, k: int) -> tuple[float, bool]:
    """attn_scale (a value, or a pass-by-value tensor) and whether the causal mask is on."""
    scale_uid, scale_value = m.get("scale", "attn_scale_value")
    if scale_uid is not None and scale_value is not None:
        raise m.refuse("give the attention scale as a tensor or a value, not both")
    scale = m.scalar("scale") if scale_uid is not None else (1.0 if scale_value is None else float(scale_value))
    causal, bottom_right, left, right, align = m.get(
        "causal_mask", "causal_mask_bottom_right", "left_bound", "right_bound", "diagonal_alignment"
    )
    if left is not None:
        raise m.refuse("a sliding window (left_bound) is not supported")
    if right is not None and right != 0:
        raise m.refuse(f"right_bound {right}: only the causal band (0) is supported")
    bottom_right = bottom_right or (right == 0 and align == 1)
    if align not in (0, 1):
        raise m.refuse(f"unknown diagonal_alignment {align}")
    if bottom_right and _dims(m, q)[2] != _dims(m, k)[2]:
        raise m.refuse("a bottom-right causal mask with Sq != Skv is not supported (sigdnn's is top-left)")
    return scale, bool(causal or bottom_right or right == 0)


@maps("SdpaAttributes")
def _sdpa(m: NodeMapping) -> None:
    q, k, v, o, bias, stats, generate = m.get("q", "k", "v", "o", "attn_mask", "stats", "generate_stats")
    if m.get("mma_core_mode") != 0:
        raise m.refuse("mma_core_mode (fp8 attention) is not supported")
    if generate is not None and bool(generate) != (stats is not None):
        raise m.refuse("generate_stats disagrees with the presence of the stats tensor")
    scale, causal = _attention_options(m, q, k)
    m.add(
        "sdpa",
        q=q,
        k=k,
        v=v,
        o=o,
        bias=bias,
        stats=stats,
        attn_scale=scale,
        use_causal_mask=causal,
        generate_stats=stats is not None,
    )


@maps("SdpaBackwardAttributes")
def _sdpa_backward(m: NodeMapping) -> None:
    names = ("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv", "attn_mask")
    q, k, v, o, d_o, stats, dq, dk, dv, bias = m.get(*names)
    scale, causal = _attention_options(m, q, k)
    m.add(
        "sdpa_backward",
        q=q,
        k=k,
        v=v,
        o=o,
        d_o=d_o,
        stats=stats,
        dq=dq,
        dk=dk,
        dv=dv,
        bias=bias,
        attn_scale=scale,
        use_causal_mask=causal,
    )


@maps("ReductionAttributes")
def _reduction(m: NodeMapping) -> None:
    mode = REDUCTION_MODES.get(m.get("mode"))
    if mode is None:
        raise m.refuse(f"unknown or unset reduction mode {m.fields['mode']}")
    x, y = m.get("in", "out")
    xd, yd = _dims(m, x), _dims(m, y)
    if len(xd) != len(yd) or any(b not in (1, a) for a, b in zip(xd, yd)):
        raise m.refuse(f"out {list(yd)} is no reduction of in {list(xd)}")
    axes = tuple(i for i, (a, b) in enumerate(zip(xd, yd)) if b == 1 and a != 1)
    m.add("reduction", mode=mode, x=x, y=y, axes=axes)


@maps("ResampleFwdAttributes")
def _resample_fwd(m: NodeMapping) -> None:
    """hipDNN's resample forward holds cuDNN's pooling modes; padding never wins a max, zeros count in an average."""
    mode = RESAMPLE_MODES.get(m.get("resample_mode"))
    if mode is None:
        raise m.refuse(f"unknown or unset resample_mode {m.fields['resample_mode']}")
    x, y, index, generate = m.get("x", "y", "index", "generate_index")
    if index is not None or generate:
        raise m.refuse("the max-pooling index output is not supported")
    pre, post, stride, window = m.get("pre_padding", "post_padding", "stride", "window")
    padding = PADDING_MODES.get(m.get("padding_mode"))
    padded = any(pre) or any(post)
    expected = "NEG_INF_PAD" if mode == "max" else "ZERO_PAD"
    if padding is None or (padded and padding not in (expected, "PADDING_NOT_SET")):
        raise m.refuse(f"padding_mode {m.fields['padding_mode']} with {mode} pooling is not supported")
    m.add("pooling", mode=mode, x=x, y=y, window=window, pre_padding=pre, post_padding=post, stride=stride)


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
