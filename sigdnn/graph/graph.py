"""Graph: the IR and the frontend-style builder API.

Every op method checks its inputs and infers its output dims at the call, so
a mistake surfaces as a GraphError on the line that made it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sigdnn.dtypes import DataType, as_data_type
from sigdnn.errors import GraphError
from sigdnn.graph.arguments import (
    INT64_MAX,
    DTypeLike,
    dtype_or_none,
    ints,
    optional_integer,
    scalar_value,
    text,
)
from sigdnn.graph.frontend import Frontend
from sigdnn.graph.frozen import FrozenDict, FrozenList, guard, refuse
from sigdnn.graph.layout import layout_order, packed_strides
from sigdnn.graph.node import Node
from sigdnn.graph.ops.base import Op
from sigdnn.graph.tensor import Tensor

SCHEMA_VERSION = (1, 5)


@attrs.define(eq=False, on_setattr=[guard, attrs.setters.convert, attrs.setters.validate])
class Graph(Frontend):
    """An operation graph: tensors by uid, nodes in insertion order."""

    name: str = attrs.field(default="graph", converter=lambda v: text(v, "graph name"))
    io_dtype: DataType | None = attrs.field(default=None, converter=dtype_or_none)
    intermediate_dtype: DataType | None = attrs.field(default=None, converter=dtype_or_none)
    compute_dtype: DataType | None = attrs.field(default=None, converter=dtype_or_none)
    tensors: dict[int, Tensor] = attrs.field(factory=dict)
    nodes: list[Node] = attrs.field(factory=list)
    preferred_engine_id: int | None = attrs.field(
        default=None, converter=lambda v: optional_integer(v, "preferred_engine_id")
    )
    schema_version: tuple[int, int] = SCHEMA_VERSION
    # Caches that keep building a graph linear; rebuilt whenever tensors or
    # nodes were changed behind the builder's back (e.g. by deserialize).
    _top_uid: tuple[int, int] = attrs.field(default=(0, 0), init=False, repr=False)
    _node_names: set[str] = attrs.field(factory=set, init=False, repr=False)
    _tensor_names: set[str] = attrs.field(factory=set, init=False, repr=False)
    _frozen: bool = attrs.field(default=False, init=False, repr=False)

    # -- freezing ------------------------------------------------------------
    def freeze(self) -> Graph:
        """Make the graph read-only (what planning does): every later change raises GraphFrozenError.

        Idempotent; returns the graph.
        """
        if not self._frozen:
            for t in self.tensors.values():
                object.__setattr__(t, "frozen", True)
            for n in self.nodes:
                object.__setattr__(n, "frozen", True)
            object.__setattr__(self, "tensors", FrozenDict(self.tensors))
            object.__setattr__(self, "nodes", FrozenList(self.nodes))
            self._frozen = True
        return self

    @property
    def frozen(self) -> bool:
        """Whether the graph is planned (read-only)."""
        return self._frozen

    def _open(self, call: str) -> None:
        if self._frozen:
            refuse(f"graph '{self.name}'", f"{call}: it is planned; build a new graph (or deserialize a copy)")

    # -- lookups -------------------------------------------------------------
    def dtype_of(self, tensor: Tensor) -> DataType:
        """The tensor's dtype, else the graph default for its kind (cuDNN's rule).

        A virtual tensor with no intermediate dtype set falls back to the
        compute dtype, then the io dtype, so a graph that names only those runs.
        """
        if tensor.is_virtual:
            dtype = tensor.dtype or self.intermediate_dtype or self.compute_dtype or self.io_dtype
        else:
            dtype = tensor.dtype or self.io_dtype
        if dtype is None:
            kind = "intermediate" if tensor.is_virtual else "io"
            raise GraphError(
                f"tensor '{tensor.name}' (uid {tensor.uid}) has no data type and the graph has no {kind} dtype"
            )
        return dtype

    def compute_dtype_of(self, node: Node) -> DataType:
        return node.compute_dtype or self.compute_dtype or DataType.FLOAT32

    def tensor_by_name(self, name: str) -> Tensor:
        for t in self.tensors.values():
            if t.name == name:
                return t
        raise KeyError(name)

    def node_by_name(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    @property
    def outputs(self) -> list[Tensor]:
        """Non-virtual tensors some node writes."""
        written = {uid for n in self.nodes for uid in n.op.outputs().values()}
        return [t for uid, t in self.tensors.items() if uid in written and not t.is_virtual]

    @property
    def inputs(self) -> list[Tensor]:
        """Non-virtual tensors no node writes that the caller must give (scalars and constants carry their data)."""
        written = {uid for n in self.nodes for uid in n.op.outputs().values()}
        return [
            t
            for uid, t in self.tensors.items()
            if uid not in written and not t.is_virtual and t.value is None and t.data is None
        ]

    # -- tensors -------------------------------------------------------------
    def _next_uid(self) -> int:
        return self._next_uids(1)[0]

    def _next_uids(self, n: int) -> list[int]:
        """``n`` unused uids: past the largest one, or the smallest free ones once that would overflow int64."""
        count, top = self._top_uid
        if count != len(self.tensors):
            top = max(self.tensors, default=0)
            self._top_uid = (len(self.tensors), top)
        if top <= INT64_MAX - n:
            return list(range(top + 1, top + 1 + n))
        free = (uid for uid in range(1, len(self.tensors) + n + 1) if uid not in self.tensors)
        return [next(free) for _ in range(n)]

    def _add_tensor(self, tensor: Tensor) -> Tensor:
        self._open(f"adding tensor '{tensor.name}'")
        if len(self._tensor_names) != len(self.tensors):
            self._tensor_names = {t.name for t in self.tensors.values()}
        if tensor.name in self._tensor_names:
            raise GraphError(f"duplicate tensor name '{tensor.name}': tensor names must be unique in a graph")
        if not -INT64_MAX - 1 <= tensor.uid <= INT64_MAX:
            raise GraphError(f"tensor '{tensor.name}': uid {tensor.uid} does not fit in int64")
        if tensor.uid in self.tensors:
            raise GraphError(
                f"duplicate tensor uid {tensor.uid} ('{tensor.name}' and '{self.tensors[tensor.uid].name}')"
            )
        self.tensors[tensor.uid] = tensor
        self._tensor_names.add(tensor.name)
        count, top = self._top_uid
        if count == len(self.tensors) - 1:
            self._top_uid = (len(self.tensors), max(top, tensor.uid))
        return tensor

    def tensor(
        self,
        name: str,
        dims: Sequence[int],
        strides: Sequence[int] | None = None,
        *,
        layout: str | None = None,
        dtype: DTypeLike = None,
        uid: int | None = None,
        is_virtual: bool = False,
    ) -> Tensor:
        """Declare a tensor; dims are logical (N, C, spatial...) whatever the layout."""
        name = text(name, "tensor name")
        dims = ints(dims, f"tensor '{name}' dims")
        if strides is not None and layout is not None:
            raise GraphError(f"tensor '{name}': give strides or layout, not both")
        if strides is not None:
            strides = ints(strides, f"tensor '{name}' strides")
            if len(strides) != len(dims):
                raise GraphError(f"tensor '{name}': {len(strides)} strides for {len(dims)} dims")
        elif layout is not None:
            try:
                strides = packed_strides(dims, layout_order(layout, len(dims)))
            except ValueError as e:
                raise GraphError(f"tensor '{name}': {e}") from None
        else:
            strides = packed_strides(dims)
        if any(d < 1 for d in dims):
            raise GraphError(f"tensor '{name}': dims {list(dims)} must all be >= 1")
        t = Tensor(
            self._next_uid() if uid is None else int(uid),
            name,
            dims,
            strides,
            dtype_or_none(dtype) or self.io_dtype,
            is_virtual,
        )
        return self._add_tensor(t)

    def scalar(
        self, name: str, value: float | int | bool, dtype: DTypeLike = None, *, uid: int | None = None
    ) -> Tensor:
        """A pass-by-value scalar (dims (1,)), its value stored in the graph."""
        name = text(name, "scalar name")
        dt = dtype_or_none(dtype) or self.compute_dtype or DataType.FLOAT32
        exact = scalar_value(value, dt, f"scalar '{name}'")
        raw = exact.astype(dt.numpy.newbyteorder("<")).tobytes()
        t = Tensor(self._next_uid() if uid is None else int(uid), name, (1,), (1,), dt, False, raw)
        return self._add_tensor(t)

    def constant(self, name: str, values: np.ndarray, *, uid: int | None = None) -> Tensor:
        """A constant tensor (a weight): ``values`` stored in the graph, in their own dtype, packed.

        The executor binds the data when the variant pack gives no buffer for
        the tensor, so a graph with constants runs without them being passed.
        """
        name = text(name, "constant name")
        if not isinstance(values, np.ndarray):
            raise GraphError(f"constant '{name}': expected a NumPy array, got {type(values).__name__}")
        try:
            dt = as_data_type(values.dtype)
        except (KeyError, ValueError, TypeError) as e:
            raise GraphError(f"constant '{name}': dtype {values.dtype} is not a sigdnn data type: {e}") from None
        dims = tuple(int(d) for d in values.shape) or (1,)
        if any(d < 1 for d in dims):
            raise GraphError(f"constant '{name}': dims {list(dims)} must all be >= 1")
        raw = _packed_bytes(values, dt.numpy.newbyteorder("<"))
        t = Tensor(
            self._next_uid() if uid is None else int(uid), name, dims, packed_strides(dims), dt, False, None, raw
        )
        return self._add_tensor(t)

    # -- nodes ---------------------------------------------------------------
    def _own(self, t: Tensor, where: str) -> Tensor:
        if not isinstance(t, Tensor) or self.tensors.get(t.uid) is not t:
            raise GraphError(f"{where}: {t!r} is not a tensor of graph '{self.name}'")
        return t

    def add_node(
        self,
        op_class: type[Op],
        inputs: Mapping[str, Tensor | None],
        attributes: Mapping[str, Any] | None = None,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Node:
        """Add a node of ``op_class``: check the inputs, infer and create the outputs, check the rule.

        The generic path every op method takes: ``inputs`` maps input ports
        to tensors (None for an absent optional port; a sequence of tensors
        for a vector port, which becomes the ports ``<port>_0``, ...),
        ``attributes`` the op's other fields. Outputs are new virtual tensors
        named ``<node>::<port>``; the op decides which optional outputs exist.
        """
        self._open(f"adding a {op_class.kind} node")
        name = text(name or f"{op_class.kind}_{len(self.nodes)}", "node name")
        if len(self._node_names) != len(self.nodes):
            self._node_names = {n.name for n in self.nodes}
        if name in self._node_names:
            raise GraphError(f"duplicate node name '{name}'")
        given, fields = self._input_ports(name, op_class, inputs)
        optional = op_class.optional_ports()
        missing = [p for p in op_class.input_ports if p not in fields and p not in optional]
        if missing:
            raise GraphError(f"node '{name}': {op_class.kind} needs input port(s) {missing}")
        placeholders = {p: (None if p in optional else 0) for p in op_class.output_ports}
        try:
            draft = op_class(**fields, **placeholders, **dict(attributes or {}))
            dims = draft.infer_dims(given)
        except GraphError as e:
            raise GraphError(f"node '{name}': {e}") from None
        except (TypeError, ValueError) as e:
            raise GraphError(f"node '{name}': bad attributes for {op_class.kind}: {e}") from None
        outputs: dict[str, Tensor] = {}
        produced = [p for p in op_class.output_ports if p in dims]
        uids = dict(zip(produced, self._next_uids(len(produced))))
        for port, uid in uids.items():
            strides = draft.default_output_strides(given, port, dims[port]) or packed_strides(dims[port])
            dtype = draft.output_dtype(port, given)
            outputs[port] = Tensor(uid, f"{name}::{port}", dims[port], strides, dtype, True)
        op = attrs.evolve(draft, **uids)
        try:
            op.check(given, outputs)
        except GraphError as e:
            raise GraphError(f"node '{name}': {e}") from None
        for t in outputs.values():
            self._add_tensor(t)
        self._node_names.add(name)
        node = Node(name, op, dtype_or_none(compute_dtype))
        self.nodes.append(node)
        return node

    def _input_ports(
        self, name: str, op_class: type[Op], inputs: Mapping[str, Any]
    ) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """(port -> tensor with vector ports spread out, op field -> uid or tuple of uids), ownership checked.

        A vector port comes as a sequence of tensors under its field's name
        (``{"x": [a, b]}``) or spread out as ``op.inputs()`` reports it
        (``{"x_0": a, "x_1": b}``).
        """
        vectors = op_class.vector_ports()
        given: dict[str, Tensor] = {}
        fields: dict[str, Any] = {}
        spread: dict[str, dict[int, Any]] = {}
        for port, value in inputs.items():
            if value is None:
                continue
            field, _, index = port.rpartition("_")
            if port not in op_class.input_ports and field in vectors and index.isdigit():
                spread.setdefault(field, {})[int(index)] = value
                continue
            if port not in op_class.input_ports:
                raise GraphError(f"node '{name}': {op_class.kind} has no input port '{port}'")
            if port not in vectors:
                given[port] = self._own(value, f"node '{name}' port '{port}'")
                fields[port] = value.uid
                continue
            if isinstance(value, Tensor) or not isinstance(value, Sequence):
                raise GraphError(f"node '{name}': port '{port}' takes a sequence of tensors, got {value!r}")
            spread[port] = dict(enumerate(value))
        for field, items in spread.items():
            if sorted(items) != list(range(len(items))):
                raise GraphError(
                    f"node '{name}': ports {field}_0..{field}_{len(items) - 1} must all be given, in order"
                )
            tensors = [items[i] for i in range(len(items))]
            for i, t in enumerate(tensors):
                given[f"{field}_{i}"] = self._own(t, f"node '{name}' port '{field}_{i}'")
            fields[field] = tuple(t.uid for t in tensors)
        return given, fields

    def outputs_of(self, node: Node, ports: Sequence[str] | None = None) -> tuple[Tensor | None, ...]:
        """The node's output tensors in port order (None for an optional output it does not produce)."""
        present = node.op.outputs()
        return tuple(self.tensors[present[p]] if p in present else None for p in (ports or node.op.output_ports))

    # -- wire ----------------------------------------------------------------
    def serialize(self) -> bytes:
        """FlatBuffers bytes of this graph (deterministic)."""
        from sigdnn.graph.serialize import serialize

        return serialize(self)

    def save(self, path: str | os.PathLike[str]) -> str:
        """Write this graph as a ``.sdg`` file at exactly ``path`` (``sigdnn.load`` reads it back)."""
        from sigdnn.graph.files import save

        return save(self, path)

    def canonical(self) -> tuple:
        """A value-comparable form, dtypes resolved where the graph's defaults allow."""

        def dtype(t: Tensor) -> DataType | None:
            try:
                return self.dtype_of(t)
            except GraphError:
                return None

        tensors = tuple(
            (t.uid, t.name, dtype(t), t.dims, t.strides, t.is_virtual, t.value, t.data) for t in self.tensors.values()
        )
        nodes = tuple((n.name, n.compute_dtype, n.op) for n in self.nodes)
        head = (self.name, self.io_dtype, self.intermediate_dtype, self.compute_dtype, self.preferred_engine_id)
        return (*head, tensors, nodes)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return self.canonical() == other.canonical()

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self.tensors)} tensors, {len(self.nodes)} nodes)"


def _packed_bytes(values: np.ndarray, dtype: np.dtype) -> bytes:
    """``values`` packed in ``dtype`` as bytes. An array that is exactly a bytes object's contents (what
    ``np.frombuffer`` and onnx's initializers give) is that object, not a copy: bytes cannot change."""
    base = values.base
    while isinstance(base, np.ndarray):
        base = base.base
    if (
        isinstance(base, bytes)
        and values.dtype == dtype
        and values.flags.c_contiguous
        and values.nbytes == len(base)  # a view lies inside its buffer, so this one starts where it does
    ):
        return base
    return np.ascontiguousarray(values, dtype=dtype).tobytes()
