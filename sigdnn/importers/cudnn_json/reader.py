"""The cuDNN graph JSON document read: version, context, tensors (pass-by-values included), nodes.

Each node goes to the one mapper registered for its tag (the family modules
beside this one); ``load`` and ``to_sdg`` are the entry points.
"""

from __future__ import annotations

import json
from typing import Any

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError, SchemaError, SigdnnError
from sigdnn.graph.arguments import scalar_value
from sigdnn.graph.graph import Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.graph.tensor import Tensor
from sigdnn.importers.common import UnsupportedOps, refuse_unknown, refuse_unread_ragged
from sigdnn.importers.cudnn_json import attention, conv, matmul, movement, norms, pointwise, reduce_pool  # noqa: F401  (registers every mapper)
from sigdnn.importers.cudnn_json.json_values import R, data_type
from sigdnn.importers.cudnn_json.mapping import MAPPERS, NodeMapping

JSON_VERSION = "2.0"
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
    "ragged_offset_uid",
    "ragged_offset_name",
}


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
            data_type(context.get("io_data_type"), "context io_data_type"),
            data_type(context.get("intermediate_data_type"), "context intermediate_data_type"),
            data_type(context.get("compute_data_type"), "context compute_data_type"),
        )
        self.graph = graph
        self.ragged: dict[int, int] = {}  # tensor uid -> its ragged offset tensor's uid
        self.placed: set[int] = set()  # ragged tensors a node took the offsets of
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
        refuse_unread_ragged(
            graph, self.ragged, self.placed, ("tensor", "has a ragged_offset_uid", "sigdnn's SDPA and SDPA_BWD")
        )
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
        dtype = data_type(t.get("data_type"), f"{where} data_type")
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
        if t.get("ragged_offset_uid") is not None:
            self.ragged[uid] = R.int_(t.get("ragged_offset_uid"), f"{where} ragged_offset_uid")
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
