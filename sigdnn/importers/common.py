"""What the three mapping layers share: the one "unsupported ops" error, attribute refusal, fresh names."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sigdnn.dtypes import DataType
from sigdnn.errors import GraphError
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops import OP_CLASSES


class UnsupportedOps:
    """Every op a model uses that sigdnn does not map, counted, so one error can list them all."""

    def __init__(self, source: str, supported: Iterable[str]) -> None:
        self.source = source
        self.supported = sorted(supported)
        self.found: dict[str, list] = {}  # op -> [count, first node]

    def add(self, op: str, node: str) -> None:
        entry = self.found.setdefault(op, [0, node])
        entry[0] += 1

    def __bool__(self) -> bool:
        return bool(self.found)

    def error(self) -> GraphError:
        listed = "; ".join(
            f"{op} ({count} node{'s' if count > 1 else ''}, first '{first}')"
            for op, (count, first) in sorted(self.found.items())
        )
        return GraphError(
            f"{self.source}: {len(self.found)} unsupported op type(s): {listed}. Supported: {', '.join(self.supported)}"
        )


def refuse_unknown(where: str, given: Iterable[str], handled: Iterable[str], what: str = "attribute") -> None:
    """GraphError naming ``where`` when ``given`` holds names the mapping does not handle: never ignored silently."""
    unknown = sorted(set(given) - set(handled))
    if unknown:
        raise GraphError(f"{where}: unsupported {what}(s) {unknown}; sigdnn refuses them rather than ignore them")


class FreshNames:
    """Unique names derived from the source's (which may be empty or repeated)."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def __call__(self, wanted: str, fallback: str) -> str:
        base = wanted or fallback
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name


def add_op(graph: Graph, kind: str, name: str, compute_dtype: DataType | None, where: str, **fields: Any) -> Node:
    """Append a node of op ``kind`` whose ports name existing tensors by uid (the formats that list tensors).

    The shape rules run when the finished graph is checked; a field the op
    cannot take is a GraphError naming the node.
    """
    try:
        op = OP_CLASSES[kind](**fields)
    except (TypeError, ValueError) as e:
        raise GraphError(f"{where}: bad attributes for sigdnn {kind}: {e}") from None
    node = Node(name, op, compute_dtype)
    graph.nodes.append(node)
    return node
