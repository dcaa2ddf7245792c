"""One cuDNN JSON node while it is mapped (:class:`NodeMapping`), and the registry of one mapper per tag."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sigdnn.errors import GraphError
from sigdnn.graph.tensor import Tensor
from sigdnn.importers.common import add_op, refuse_unknown
from sigdnn.importers.cudnn_json.json_values import R, data_type

if TYPE_CHECKING:
    from sigdnn.importers.cudnn_json.reader import JsonImporter

NODE_KEYS = {"tag", "name", "compute_data_type", "inputs", "outputs"}


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
        self.compute = data_type(n.get("compute_data_type"), f"{self.where} compute_data_type")

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
