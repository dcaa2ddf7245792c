"""ONNX models -> sigdnn graphs (opsets 13 through the newest the installed ``onnx`` knows; an older model
whose every op is still defined as at opset 13 is read too).

Needs the ``onnx`` extra (``pip install sigdnn[onnx]``). The model is read
node by node in its (topological) order:

- values known at import time (initializers, ``Constant`` nodes, and every
  node whose inputs are all known and whose output size is priced first,
  folded with ``onnx.reference`` (see ``onnx_fold``); ``Shape`` and ``Size``
  of a sigdnn tensor are known from its dims) stay NumPy arrays;
- every other node is mapped onto sigdnn ops by the one handler for its op
  type in ``sigdnn.importers.onnx_ops`` (one module per group of ops);
- a known value that a sigdnn op reads becomes a constant tensor of the
  graph (``Graph.constant``): weights travel inside the ``.sdg``.

An op type without a handler is collected, not raised at once: the model
gets one GraphError listing every unsupported op type with its count and
first node. An attribute a handler does not understand is a GraphError
naming the node: nothing is ignored. The model file and its external data
are read by ``onnx_files`` (inside the model's folder only, sizes capped).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError, SchemaError, SigdnnError
from sigdnn.graph.graph import Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.views import view_layout
from sigdnn.importers.common import FreshNames, UnsupportedOps, input_shape_overrides, refuse_unknown
from sigdnn.importers.onnx_files import read_model
from sigdnn.importers.onnx_fold import MAX_FOLDED_ELEMENTS, Unpriced, price
from sigdnn.importers.onnx_node import (
    FOLD_ONLY,
    HANDLERS,
    OnnxNode,
    Value,
    load_handlers,
    onnx_dtype,
    onnx_module,
)
from sigdnn.importers.onnx_types import inferred_dtypes
from sigdnn.io.files import PathArg
from sigdnn.io.graph_files import DEFAULT_MAX_GRAPH_FILE_BYTES
from sigdnn.io.units import format_bytes

MIN_OPSET = 13


class OnnxImporter:
    """Maps one ModelProto onto a new Graph."""

    def __init__(
        self,
        model: Any,
        input_shapes: Mapping[str, Sequence[int]] | None,
        name: str | None,
        constants: Mapping[str, Any] | None = None,
        limits: Limits = DEFAULT_LIMITS,
    ) -> None:
        onnx = onnx_module()
        self.limits = limits
        self.computed_bytes = 0  # of values computed at import time, counted against limits
        load_handlers()
        self.onnx = onnx
        self.model = model
        opsets = {o.domain or "ai.onnx": o.version for o in model.opset_import}
        self.opset = opsets.get("ai.onnx")
        newest = onnx.defs.onnx_opset_version()
        if self.opset is None or not 1 <= self.opset <= newest:
            raise GraphError(
                f"ONNX model: default-domain opset {self.opset} is not supported (sigdnn reads {MIN_OPSET}..{newest})"
            )
        if self.opset < MIN_OPSET:
            self._check_old_opset()
        self.values: dict[str, Value] = {}
        self.constants: dict[str, Tensor] = {}
        self.initializer_of: dict[int, tuple[np.ndarray, str]] = {}  # id -> (the array, kept alive; its name)
        self.names = FreshNames()
        self.node_names = FreshNames()
        self.input_shapes = input_shape_overrides(input_shapes)
        self.frozen = {k: np.asarray(v) for k, v in (constants or {}).items()}
        self.value_dtypes = inferred_dtypes(onnx, model)
        float_dtype = self._main_float_dtype()
        compute = DataType.FLOAT64 if float_dtype == DataType.FLOAT64 else DataType.FLOAT32
        self.graph = Graph(name or model.graph.name or "onnx", float_dtype, float_dtype, compute)

    # -- setup ---------------------------------------------------------------
    def _check_old_opset(self) -> None:
        """A model older than opset 13 is read when each of its ops is still defined as it was at opset 13."""
        changed = set()
        for node in self.model.graph.node:
            if node.domain not in ("", "ai.onnx"):
                continue
            try:
                then = self.onnx.defs.get_schema(node.op_type, self.opset).since_version
                now = self.onnx.defs.get_schema(node.op_type, MIN_OPSET).since_version
            except Exception:  # no such op at that opset: the unsupported-op pass reports it
                continue
            if then != now:
                changed.add(node.op_type)
        if changed:
            raise GraphError(
                f"ONNX model: opset {self.opset} defines {sorted(changed)} differently from opset {MIN_OPSET}; "
                f"sigdnn reads opsets {MIN_OPSET}.. (convert the model with onnx.version_converter)"
            )

    def _main_float_dtype(self) -> DataType:
        counts: dict[DataType, int] = {}
        for dt in self.value_dtypes.values():
            if dt.is_float:
                counts[dt] = counts.get(dt, 0) + 1
        return max(counts, key=lambda d: counts[d]) if counts else DataType.FLOAT32

    def as_tensor(self, v: Value, name: str) -> Tensor:
        """A known value as a constant tensor of the graph (one per value name)."""
        if isinstance(v, Tensor):
            return v
        name = self.initializer_of.get(id(v), (None, name))[1]  # an initializer keeps its ONNX name (overridable)
        if name not in self.constants:
            self.constants[name] = self.graph.constant(self.names(name, "constant"), np.asarray(v))
        return self.constants[name]

    def _inputs(self) -> None:
        onnx = self.onnx
        initializers = {t.name for t in self.model.graph.initializer}
        for t in self.model.graph.initializer:
            try:
                self.values[t.name] = onnx.numpy_helper.to_array(t)
            except Exception as e:  # external data missing, bad raw_data size, ...
                raise SchemaError(f"ONNX initializer '{t.name}': {type(e).__name__}: {e}") from None
            # by identity: the very array a node uses unchanged becomes the constant named after it
            self.initializer_of[id(self.values[t.name])] = (self.values[t.name], t.name)
        inputs = {info.name for info in self.model.graph.input}
        unknown = sorted(set(self.frozen) - inputs)
        if unknown:
            raise GraphError(f"ONNX model: constants {unknown} name no graph input")
        unknown = sorted(set(self.input_shapes) - (inputs - initializers))
        if unknown:
            known = ", ".join(sorted(inputs - initializers)) or "none"
            raise GraphError(f"ONNX model: input_shapes {unknown} name no graph input (its inputs: {known})")
        for info in self.model.graph.input:
            if info.name in self.frozen:
                self.values[info.name] = self.frozen[info.name]
                continue
            if info.name in initializers:
                continue
            where = f"ONNX graph input '{info.name}'"
            tt = info.type.tensor_type
            if not info.type.HasField("tensor_type"):
                raise GraphError(f"{where}: only tensor inputs are supported")
            dtype = onnx_dtype(tt.elem_type, where)
            if info.name in self.input_shapes:
                dims = self.input_shapes[info.name]
            else:
                dims = []
                for axis, d in enumerate(tt.shape.dim):
                    if not d.HasField("dim_value") or d.dim_value < 1:
                        label = d.dim_param or "unknown"
                        raise GraphError(
                            f"{where}: dim {axis} is symbolic ({label!r}); give its shape with "
                            f"input_shapes={{'{info.name}': (...)}} (command line: --input-shape {info.name}=D0,D1,...)"
                        )
                    dims.append(d.dim_value)
                dims = tuple(dims) or (1,)
            self.names.used.add(info.name)
            self.values[info.name] = self.graph.tensor(info.name, dims, dtype=dtype)

    # -- nodes ---------------------------------------------------------------
    def _fold(self, node: OnnxNode) -> list[Value] | None:
        """The node's outputs computed now when every input is known (or, for Shape / Size, the dims are)."""
        proto = node.proto
        if proto.op_type in ("Shape", "Size") and node.has(0) and proto.domain in ("", "ai.onnx"):
            dims = np.array(node.dims(0), dtype=np.int64)
            if proto.op_type == "Size":
                return [np.array(int(np.prod(dims)), dtype=np.int64)]
            start, end = node.attr("start", 0), node.attr("end", None)
            node.refuse_unknown_attributes()
            if not all(isinstance(b, int) for b in (start, end) if b is not None):
                raise node.refuse(f"start {start!r} and end {end!r} must be integers")
            return [dims[start:end]]
        known = [self.values.get(n) for n in proto.input if n]
        if any(not isinstance(v, np.ndarray) for v in known) or proto.domain not in ("", "ai.onnx"):
            return None
        if proto.op_type not in HANDLERS and proto.op_type not in FOLD_ONLY:
            return None
        if proto.op_type in ("RandomNormal", "RandomUniform", "Multinomial", "Bernoulli"):
            return None
        from onnx.reference import ReferenceEvaluator

        feeds = {n: self.values[n] for n in proto.input if n}
        reserved = self._priced(node, [self.values[n] if n else None for n in proto.input])
        if reserved is None:
            return None
        try:
            outputs = list(ReferenceEvaluator(proto).run(None, feeds))
        except Exception as e:  # the node is bad; say which
            raise GraphError(f"{node.where}: computing it at import time failed: {type(e).__name__}: {e}") from None
        self.spend(sum(np.asarray(v).nbytes for v in outputs) - reserved, node)
        return outputs

    def _priced(self, node: OnnxNode, inputs: list[Any]) -> int | None:
        """Bytes reserved (8 an element) for a fold's outputs; None when its size is unknown beforehand (not folded)."""
        try:
            count = price(node.op_type, inputs, node.attr, self.opset or MIN_OPSET, node.proto)
        except Unpriced:
            if node.op_type in FOLD_ONLY:
                raise node.refuse("its output size cannot be known before computing it at import time") from None
            return None
        except (ValueError, TypeError, OverflowError, IndexError, AttributeError):
            raise node.refuse("its inputs do not describe a valid output shape") from None
        if count > MAX_FOLDED_ELEMENTS:
            raise node.refuse(f"computing it at import time would make {count} elements (limit {MAX_FOLDED_ELEMENTS})")
        self.spend(count * 8, node)
        return count * 8

    def spend(self, nbytes: int, node: OnnxNode) -> None:
        """Count bytes of values computed at import time against ``Limits.max_total_bytes`` (before making them)."""
        self.computed_bytes += nbytes
        if self.computed_bytes > self.limits.max_total_bytes:
            raise node.refuse(
                f"values computed at import time would take {format_bytes(self.computed_bytes)}, over the "
                f"{format_bytes(self.limits.max_total_bytes)} limit (Limits.max_total_bytes; sigdnn: --max-bytes)"
            )

    def _map(self, node: OnnxNode) -> list[Value | None]:
        handler = HANDLERS[node.op_type]
        start = len(self.graph.nodes)
        try:
            outputs = list(handler(node))
        except (IndexError, KeyError, ValueError, TypeError, ArithmeticError) as e:
            if isinstance(e, SigdnnError):
                raise
            # inputs or attributes of shapes the op cannot have (a hostile or broken model)
            raise node.refuse(f"inputs or attributes do not fit the op: {type(e).__name__}: {e}") from None
        self._inherit_dtypes(start)
        node.refuse_unknown_attributes()
        wanted = [i for i, n in enumerate(node.proto.output) if n]
        missing = [node.proto.output[i] for i in wanted if i >= len(outputs) or outputs[i] is None]
        if missing:
            raise node.refuse(f"sigdnn does not produce output(s) {missing} of this op")
        return outputs

    def run(self) -> Graph:
        self._inputs()
        unsupported = UnsupportedOps("ONNX model", HANDLERS)
        blocked: set[str] = set()
        for index, proto in enumerate(self.model.graph.node):
            name = self.names(proto.name, f"{proto.op_type}_{index}")
            node = OnnxNode(self, proto, name)
            if proto.domain not in ("", "ai.onnx"):
                unsupported.add(f"{proto.domain}.{proto.op_type}", name)
                blocked.update(proto.output)
                continue
            if blocked.intersection(proto.input):
                if proto.op_type not in HANDLERS and proto.op_type not in FOLD_ONLY:
                    unsupported.add(proto.op_type, name)
                blocked.update(proto.output)
                continue
            missing = [n for n in proto.input if n and n not in self.values]
            if missing:
                raise GraphError(f"{node.where}: input(s) {missing} are produced by no earlier node (not topological)")
            self._refuse_undefined_attributes(node)
            outputs = self._fold(node)
            if outputs is None:
                if proto.op_type not in HANDLERS:
                    unsupported.add(proto.op_type, name)
                    blocked.update(proto.output)
                    continue
                if unsupported:  # keep scanning for the error's list, build nothing more
                    blocked.update(proto.output)
                    continue
                top = max(self.graph.tensors, default=0)
                outputs = self._map(node)
                self._set_output_dtypes(proto, outputs, top)
            for out_name, v in zip(proto.output, outputs):
                if out_name:
                    self.values[out_name] = v
        if unsupported:
            raise unsupported.error()
        self._outputs()
        _views_for_pointwise_readers(self.graph)
        return self.graph

    def _refuse_undefined_attributes(self, node: OnnxNode) -> None:
        """Attributes the op's ONNX schema does not define, refused before the node is folded or mapped: a mapping
        refuses the attributes it does not read only once it has run, and a hostile model's other fields can make
        that run cost gigabytes first (a Pad of 2^25 rows with a misspelt mode: a 2 GiB constant, 27 s)."""
        try:
            schema = self.onnx.defs.get_schema(node.op_type, self.opset)
        except self.onnx.defs.SchemaError:
            return  # no such op at this opset: reported as unsupported
        refuse_unknown(node.where, node.attributes, schema.attributes)

    def _inherit_dtypes(self, start: int) -> None:
        """Outputs of the nodes just made that no op typed take their first input's type, not the graph default
        (a reshaped bool mask stays bool, an int64 chain stays int64); ONNX's own types are set after."""
        for n in self.graph.nodes[start:]:
            first = next(iter(n.op.inputs().values()), None)
            dtype = self.graph.tensors[first].dtype if first is not None else None
            if dtype is None:
                continue
            for uid in n.op.outputs().values():
                if self.graph.tensors[uid].dtype is None:
                    self.graph.tensors[uid].set_data_type(dtype)

    def _set_output_dtypes(self, proto: Any, outputs: Sequence[Value | None], top_uid: int) -> None:
        """Outputs this node created take the element type ONNX infers for them."""
        for out_name, v in zip(proto.output, outputs):
            created = isinstance(v, Tensor) and v.uid > top_uid
            if created and out_name in self.value_dtypes and v.dtype != self.value_dtypes[out_name]:
                v.set_data_type(self.value_dtypes[out_name])

    def _outputs(self) -> None:
        seen: set[int] = set()
        for index, info in enumerate(self.model.graph.output):
            where = f"ONNX graph output '{info.name}'"
            v = self.values.get(info.name)
            if v is None:
                raise GraphError(f"{where} is produced by no node")
            if isinstance(v, np.ndarray):
                raise GraphError(f"{where} is a constant known at import time; sigdnn graphs compute their outputs")
            written = {u for n in self.graph.nodes for u in n.op.outputs().values()}
            if v.uid not in written or v.uid in seen or not v.is_virtual:
                v = self.graph.pointwise(
                    "identity", v, name=self.node_names(f"{info.name}/identity", f"output_{index}")
                )
            seen.add(v.uid)
            v.set_output(True)
            if v.name != info.name:
                if info.name in {t.name for t in self.graph.tensors.values()}:
                    raise GraphError(f"{where}: its name is taken by another tensor of the graph")
                v.set_name(info.name)
            if info.type.tensor_type.elem_type:
                v.set_data_type(onnx_dtype(info.type.tensor_type.elem_type, where))


def _views_for_pointwise_readers(graph: Graph) -> None:
    """ONNX gives no strides: a transpose whose output only pointwise nodes read is declared a view of its input
    (``view_layout``), so the executor runs no step for it and the pointwise kernels read it strided (ViT's k^T
    before its scale, ConvNeXt's layout swaps before a layer scale). Other readers (a matmul, a norm) keep a
    packed copy, the layout their builders are written for. (A reshape needs nothing: every imported value is
    packed or such a view, which no reshape reads, and a reshape of a packed tensor is already a view.)"""
    readers: dict[int, set[str]] = {}
    for node in graph.nodes:
        for uid in node.op.inputs().values():
            readers.setdefault(uid, set()).add(node.op.kind)
    for node in graph.nodes:
        if node.op.kind == "transpose":
            y = graph.tensors[node.op.outputs()["y"]]
            if y.is_virtual and readers.get(y.uid) == {"pointwise"}:
                view_layout(graph, y)


def load(
    model_or_path: Any,
    *,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
    constants: Mapping[str, Any] | None = None,
    name: str | None = None,
    base_dir: PathArg | None = None,
    max_bytes: int = DEFAULT_MAX_GRAPH_FILE_BYTES,
    limits: Limits = DEFAULT_LIMITS,
) -> Graph:
    """An ONNX model (ModelProto, serialized bytes or a path) as a checked sigdnn Graph.

    Initializers become constant tensors of the graph. ``input_shapes``
    fixes symbolic input dims (``{"x": (1, 3, 224, 224)}``); ``constants``
    freezes graph inputs to known values (a shape or axes given as an input,
    which sigdnn ops need at import time). External data is read from the
    model file's folder (``base_dir`` for a model given as bytes or a
    ModelProto); the model and its external data together may be at most
    ``max_bytes``. Values computed at import time count against ``limits``.
    """
    from sigdnn.graph.checks import check_graph

    graph = OnnxImporter(read_model(model_or_path, base_dir, max_bytes), input_shapes, name, constants, limits).run()
    check_graph(graph, limits)
    return graph


def to_sdg(
    data: bytes,
    path: str | None = None,
    max_bytes: int = DEFAULT_MAX_GRAPH_FILE_BYTES,
    input_shapes: Mapping[str, Sequence[int]] | None = None,
) -> bytes:
    """ONNX model bytes -> sigdnn graph bytes (the GraphFormat hook of ``sigdnn.io``; external data beside ``path``)."""
    base_dir = None if path is None else os.path.dirname(os.path.abspath(path))
    return load(data, base_dir=base_dir, max_bytes=max_bytes, input_shapes=input_shapes).serialize()
