"""One ONNX node as its handler sees it, and the registry of handlers by op type.

The handlers (``sigdnn.importers.onnx_ops``, one module per group of ops)
register with ``onnx_op`` and read their node through ``OnnxNode``; the
importer (``sigdnn.importers.onnx``) walks the model and calls them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from sigdnn.dtypes import DataType, as_data_type
from sigdnn.errors import GraphError
from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor
from sigdnn.importers.common import refuse_unknown

if TYPE_CHECKING:
    from sigdnn.importers.onnx import OnnxImporter

Value = Tensor | np.ndarray  # a tensor of the graph, or a value known at import time
Handler = Callable[["OnnxNode"], Sequence[Value | None]]
HANDLERS: dict[str, Handler] = {}
# Ops computed at import time when every input is known; never mapped onto graph nodes.
FOLD_ONLY = frozenset(
    {"Constant", "Shape", "Size", "Range", "ConstantOfShape", "Expand", "NonZero", "ScatterND", "Tile"}
)


def onnx_op(*op_types: str) -> Callable[[Handler], Handler]:
    """Register the one handler for these ONNX op types (default domain)."""

    def register(fn: Handler) -> Handler:
        for op in op_types:
            if op in HANDLERS:
                raise RuntimeError(f"ONNX op {op} mapped twice")
            HANDLERS[op] = fn
        return fn

    return register


def onnx_module() -> Any:
    try:
        import onnx
    except ImportError:
        raise GraphError("importing ONNX needs the onnx package: pip install 'sigdnn[onnx]'") from None
    return onnx


def supported_ops() -> list[str]:
    load_handlers()
    return sorted(HANDLERS)


def load_handlers() -> None:
    from sigdnn.importers import onnx_ops  # noqa: F401  (registers every handler)


def onnx_dtype(elem_type: int, where: str) -> DataType:
    onnx = onnx_module()
    try:
        return as_data_type(onnx.helper.tensor_dtype_to_np_dtype(elem_type))
    except (KeyError, ValueError, TypeError):
        name = (
            onnx.TensorProto.DataType.Name(elem_type) if elem_type in onnx.TensorProto.DataType.values() else elem_type
        )
        raise GraphError(f"{where}: ONNX element type {name} has no sigdnn data type") from None


class OnnxNode:
    """One ONNX node while it is mapped: its inputs as values, its attributes (each read marked as handled)."""

    def __init__(self, importer: OnnxImporter, proto: Any, name: str) -> None:
        onnx = onnx_module()
        self.importer, self.proto, self.name = importer, proto, name
        self.op_type: str = proto.op_type
        self.where = f"ONNX node '{name}' ({proto.op_type})"
        self.attributes = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}
        self.handled: set[str] = set()
        self.count = 0  # internal sigdnn nodes made so far

    @property
    def graph(self) -> Graph:
        return self.importer.graph

    # -- attributes ----------------------------------------------------------
    def attr(self, key: str, default: Any = None) -> Any:
        self.handled.add(key)
        value = self.attributes.get(key, default)
        if isinstance(value, bytes):
            value = value.decode("utf-8", "replace")
        if isinstance(value, list):
            value = tuple(v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in value)
        return value

    def refuse_unknown_attributes(self) -> None:
        refuse_unknown(self.where, self.attributes, self.handled)

    def refuse(self, why: str) -> GraphError:
        return GraphError(f"{self.where}: {why}")

    # -- inputs --------------------------------------------------------------
    def has(self, i: int) -> bool:
        return i < len(self.proto.input) and self.proto.input[i] != ""

    def value(self, i: int) -> Value:
        if not self.has(i):
            raise self.refuse(f"input {i} is required")
        return self.importer.values[self.proto.input[i]]

    def tensor(self, i: int) -> Tensor:
        return self.importer.as_tensor(self.value(i), self.proto.input[i])

    def const(self, i: int, what: str) -> np.ndarray:
        v = self.value(i)
        if not isinstance(v, np.ndarray):
            raise self.refuse(f"{what} (input {i}, '{self.proto.input[i]}') must be known at import time")
        return v

    def ints(self, i: int, what: str) -> tuple[int, ...]:
        return tuple(int(v) for v in self.const(i, what).reshape(-1))

    def dims(self, i: int) -> tuple[int, ...]:
        v = self.value(i)
        return tuple(v.shape) if isinstance(v, np.ndarray) else v.dims

    def dtype(self, i: int) -> DataType:
        v = self.value(i)
        return as_data_type(v.dtype) if isinstance(v, np.ndarray) else self.graph.dtype_of(v)

    # -- building ------------------------------------------------------------
    def fresh(self, what: str) -> str:
        """A unique name for a sigdnn node this ONNX node makes (its own name for the first unnamed one)."""
        self.count += 1
        wanted = self.name if self.count == 1 and not what else f"{self.name}/{what or self.count}"
        return self.importer.node_names(wanted, f"{self.name}/{self.count}")

    def materialize(self, v: Value, what: str) -> Tensor:
        return v if isinstance(v, Tensor) else self.importer.as_tensor(v, f"{self.name}/{what}")

    def pointwise(self, mode: str, *inputs: Value, what: str = "", **params: float) -> Tensor:
        tensors = [self.materialize(v, f"{what or mode}_in{i}") for i, v in enumerate(inputs)]
        return self.graph.pointwise(mode, *tensors, name=self.fresh(what or mode), **params)

    def reshape(self, v: Value, dims: Sequence[int], what: str = "reshape") -> Value:
        dims = tuple(int(d) for d in dims)
        if isinstance(v, np.ndarray):
            return v.reshape(dims)
        if v.dims == dims:
            return v
        return self.graph.reshape(v, dims, name=self.fresh(what))

    def transpose(self, v: Value, perm: Sequence[int], what: str = "transpose") -> Value:
        perm = tuple(int(p) for p in perm)
        if isinstance(v, np.ndarray):
            return np.ascontiguousarray(v.transpose(perm))
        if perm == tuple(range(len(perm))):
            return v
        return self.graph.transpose(v, perm, name=self.fresh(what))
