"""Declines several builder libraries share, so each says the same thing in the same words."""

from __future__ import annotations

from collections.abc import Collection

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.sdpa import VARLEN_PORTS, Band


def decline_non_float(node: Node, graph: Graph, integer_ports: Collection[str] = ()) -> None:
    """NotSupported naming the first port outside ``integer_ports`` whose tensor is not floating point."""
    for port, uid in node.op.ports().items():
        dtype = graph.dtype_of(graph.tensors[uid])
        if port not in integer_ports and not dtype.is_float:
            raise NotSupported(
                f"node '{node.name}': port '{port}' (tensor '{graph.tensors[uid].name}') is {dtype}; "
                f"{node.op.kind} is floating point only"
            )


def band_beyond_causal(node: Node, graph: Graph) -> str | None:
    """The diagonal band an attention node masks by beyond the fast kernels' mask (none, or the top-left causal
    one), described; None when it has none. Bottom-right alignment with no padding and Sq == Skv is the top-left diagonal."""
    op = node.op
    band = Band.of(op)
    if not band.masks:
        return None
    q, k = graph.tensors[op.q], graph.tensors[op.k]
    level = not any(getattr(op, port) is not None for port in VARLEN_PORTS) and q.dims[2] == k.dims[2]
    if band.left is None and band.right == 0 and (not band.bottom_right or level):
        return None
    alignment = "bottom-right" if band.bottom_right else "top-left"
    return f"left_bound {band.left}, right_bound {band.right}, {alignment} aligned"


def causal_mask(op: object) -> bool:
    """Whether a node the fast kernels take (``band_beyond_causal`` None) masks as the top-left causal mask: its
    causal flag, or a right bound 0 however the graph spelled it (a cuDNN JSON or pygraph right_bound)."""
    return Band.of(op).masks
