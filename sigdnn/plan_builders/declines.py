"""Declines several builder libraries share, so each says the same thing in the same words."""

from __future__ import annotations

from collections.abc import Collection

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node


def decline_non_float(node: Node, graph: Graph, integer_ports: Collection[str] = ()) -> None:
    """NotSupported naming the first port outside ``integer_ports`` whose tensor is not floating point."""
    for port, uid in node.op.ports().items():
        dtype = graph.dtype_of(graph.tensors[uid])
        if port not in integer_ports and not dtype.is_float:
            raise NotSupported(
                f"node '{node.name}': port '{port}' (tensor '{graph.tensors[uid].name}') is {dtype}; "
                f"{node.op.kind} is floating point only"
            )
