"""Graph: the IR and the frontend-style builder API.

Every op method checks its inputs and infers its output dims at the call, so
a mistake surfaces as a GraphError on the line that made it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import numpy as np

from sigdnn.dtypes import DataType, as_data_type
from sigdnn.errors import GraphError
from sigdnn.graph.layout import layout_order, packed_strides
from sigdnn.graph.node import Node
from sigdnn.graph.ops import ConvFprop, Matmul, Op
from sigdnn.graph.ops.pointwise import make_pointwise
from sigdnn.graph.tensor import Tensor

SCHEMA_VERSION = (1, 0)
_INT64_MAX = 2**63 - 1
DTypeLike = DataType | str | None


def _dtype_or_none(value: DTypeLike) -> DataType | None:
    return None if value is None else as_data_type(value)


def _ints(values: Iterable[Any], what: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in values)
    except (TypeError, ValueError):
        raise GraphError(f"{what} must be a sequence of integers, got {values!r}") from None


@attrs.define(eq=False)
class Graph:
    """An operation graph: tensors by uid, nodes in insertion order."""

    name: str = "graph"
    io_dtype: DataType | None = attrs.field(default=None, converter=_dtype_or_none)
    intermediate_dtype: DataType | None = attrs.field(default=None, converter=_dtype_or_none)
    compute_dtype: DataType | None = attrs.field(default=None, converter=_dtype_or_none)
    tensors: dict[int, Tensor] = attrs.field(factory=dict)
    nodes: list[Node] = attrs.field(factory=list)
    preferred_engine_id: int | None = None
    schema_version: tuple[int, int] = SCHEMA_VERSION
    # Caches that keep building a graph linear; rebuilt whenever tensors or
    # nodes were changed behind the builder's back (e.g. by deserialize).
    _top_uid: tuple[int, int] = attrs.field(default=(0, 0), init=False, repr=False)
    _node_names: set[str] = attrs.field(factory=set, init=False, repr=False)

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
        """Non-virtual, non-scalar tensors no node writes."""
        written = {uid for n in self.nodes for uid in n.op.outputs().values()}
        return [t for uid, t in self.tensors.items() if uid not in written and not t.is_virtual and t.value is None]

    # -- tensors -------------------------------------------------------------
    def _next_uid(self) -> int:
        """One past the largest uid; the smallest free one once that would overflow int64."""
        count, top = self._top_uid
        if count != len(self.tensors):
            top = max(self.tensors, default=0)
            self._top_uid = (len(self.tensors), top)
        if top < _INT64_MAX:
            return top + 1
        return next(uid for uid in range(1, len(self.tensors) + 2) if uid not in self.tensors)

    def _add_tensor(self, tensor: Tensor) -> Tensor:
        if not -_INT64_MAX - 1 <= tensor.uid <= _INT64_MAX:
            raise GraphError(f"tensor '{tensor.name}': uid {tensor.uid} does not fit in int64")
        if tensor.uid in self.tensors:
            raise GraphError(
                f"duplicate tensor uid {tensor.uid} ('{tensor.name}' and '{self.tensors[tensor.uid].name}')"
            )
        self.tensors[tensor.uid] = tensor
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
        dims = _ints(dims, f"tensor '{name}' dims")
        if strides is not None and layout is not None:
            raise GraphError(f"tensor '{name}': give strides or layout, not both")
        if strides is not None:
            strides = _ints(strides, f"tensor '{name}' strides")
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
            _dtype_or_none(dtype) or self.io_dtype,
            is_virtual,
        )
        return self._add_tensor(t)

    def scalar(
        self, name: str, value: float | int | bool, dtype: DTypeLike = None, *, uid: int | None = None
    ) -> Tensor:
        """A pass-by-value scalar (dims (1,)), its value stored in the graph."""
        dt = _dtype_or_none(dtype) or self.compute_dtype or DataType.FLOAT32
        raw = np.asarray(value).astype(dt.numpy).astype(dt.numpy.newbyteorder("<")).tobytes()
        t = Tensor(self._next_uid() if uid is None else int(uid), name, (1,), (1,), dt, False, raw)
        return self._add_tensor(t)

    # -- nodes ---------------------------------------------------------------
    def _own(self, t: Tensor, where: str) -> Tensor:
        if not isinstance(t, Tensor) or self.tensors.get(t.uid) is not t:
            raise GraphError(f"{where}: {t!r} is not a tensor of graph '{self.name}'")
        return t

    def _add_node(
        self, name: str | None, default: str, make_op: Any, inputs: dict[str, Tensor], compute_dtype: DTypeLike
    ) -> Node:
        """Create the op's outputs, check its rule, append the node."""
        name = name or f"{default}_{len(self.nodes)}"
        for port, t in inputs.items():
            self._own(t, f"node '{name}' port '{port}'")
        out_uid = self._next_uid()
        op: Op = make_op(out_uid)
        if len(op.output_ports) != 1:
            raise GraphError(f"node '{name}': ops with several outputs need explicit tensors")
        port = op.output_ports[0]
        try:
            dims = op.infer_dims(inputs)[port]
        except GraphError as e:
            raise GraphError(f"node '{name}': {e}") from None
        strides = op.default_output_strides(inputs, port, dims) or packed_strides(dims)
        out = Tensor(out_uid, f"{name}::{port}", dims, strides, None, True)
        try:
            op.check(inputs, {port: out})
        except GraphError as e:
            raise GraphError(f"node '{name}': {e}") from None
        if len(self._node_names) != len(self.nodes):
            self._node_names = {n.name for n in self.nodes}
        if name in self._node_names:
            raise GraphError(f"duplicate node name '{name}'")
        self._node_names.add(name)
        self._add_tensor(out)
        node = Node(name, op, _dtype_or_none(compute_dtype))
        self.nodes.append(node)
        return node

    def pointwise(
        self,
        mode: str,
        a: Tensor,
        b: Tensor | None = None,
        c: Tensor | None = None,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
        **params: float | int,
    ) -> Tensor:
        """One pointwise mode (``"add"``, ``"relu_fwd"``, ...) over up to 3 inputs."""
        given = [t for t in (a, b, c) if t is not None]
        inputs = dict(zip(("in_0", "in_1", "in_2"), given))
        node = self._add_node(
            name, mode, lambda out: make_pointwise(mode, [t.uid for t in given], out, params), inputs, compute_dtype
        )
        return self.tensors[node.op.out_0]

    def matmul(self, a: Tensor, b: Tensor, *, name: str | None = None, compute_dtype: DTypeLike = None) -> Tensor:
        """c = a @ b, batched over leading dims that broadcast."""
        node = self._add_node(name, "matmul", lambda out: Matmul(a.uid, b.uid, out), {"a": a, "b": b}, compute_dtype)
        return self.tensors[node.op.c]

    def conv_fprop(
        self,
        x: Tensor,
        w: Tensor,
        padding: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        dilation: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Forward convolution (cross-correlation); padding or pre/post padding."""
        spatial = max(len(x.dims) - 2, 0)
        if padding is not None and (pre_padding is not None or post_padding is not None):
            raise GraphError(f"node '{name or 'conv_fprop'}': give padding or pre_padding/post_padding, not both")
        pre = _ints(padding if padding is not None else pre_padding or (0,) * spatial, "conv_fprop padding")
        post = _ints(padding if padding is not None else post_padding or (0,) * spatial, "conv_fprop padding")
        stride = _ints(stride or (1,) * spatial, "conv_fprop stride")
        dilation = _ints(dilation or (1,) * spatial, "conv_fprop dilation")
        node = self._add_node(
            name,
            "conv_fprop",
            lambda out: ConvFprop(x.uid, w.uid, out, pre, post, stride, dilation),
            {"x": x, "w": w},
            compute_dtype,
        )
        return self.tensors[node.op.y]

    def __getattr__(self, mode: str) -> Any:
        """Per-mode conveniences: ``g.add(a, b)``, ``g.relu_fwd(x)``, ``g.relu(x)``."""
        from sigdnn.graph.ops.pointwise import MODES

        alias = {"relu": "relu_fwd", "tanh": "tanh_fwd", "sigmoid": "sigmoid_fwd", "gelu": "gelu_fwd",
                 "elu": "elu_fwd", "swish": "swish_fwd", "softplus": "softplus_fwd"}.get(mode, mode)  # fmt: skip
        if alias in MODES:
            return lambda *args, **kw: self.pointwise(alias, *args, **kw)
        raise AttributeError(mode)

    # -- wire ----------------------------------------------------------------
    def serialize(self) -> bytes:
        """FlatBuffers bytes of this graph (deterministic)."""
        from sigdnn.graph.serialize import serialize

        return serialize(self)

    def canonical(self) -> tuple:
        """A value-comparable form, dtypes resolved where the graph's defaults allow."""

        def dtype(t: Tensor) -> DataType | None:
            try:
                return self.dtype_of(t)
            except GraphError:
                return None

        tensors = tuple(
            (t.uid, t.name, dtype(t), t.dims, t.strides, t.is_virtual, t.value) for t in self.tensors.values()
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
