"""Views: data-movement nodes that run no step, their outputs aliased into their inputs' memory.

Decided at prepare, for every backend, from the declared strides alone (so
every builder sees a tensor's memory exactly as the graph declares it):

- a reshape, transpose or slice whose output's declared strides address the
  input's elements where they are (``sigdnn.graph.views``) makes its output
  an alias of its input, at the slice's offset;
- a concatenate whose every piece's declared strides are the output's makes
  each piece an alias of its slice of the output: the producers write
  straight into the output, and the concatenate itself moves nothing.

Only virtual tensors alias (the caller's inputs and outputs are never views
of memory the executor owns), of one dtype, at offsets that keep the
arena's 256-byte alignment. On the GPU backends a reshape, transpose or
slice may also alias its output into a caller's input (``into_inputs``):
the GPU memory takes a caller's buffer only with the declared strides, and
nothing writes an input, so the GEMM of ``dy @ w^T`` reads the caller's w
through the transposed view instead of a copy. The memory plan gives an
alias's root (the tensor that owns memory) one lifetime spanning every
member's, so no buffer a view reads is reused while the view is live.
Such a node is a step of the ``VIEW`` builder, whose plan launches nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import is_non_overlapping
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.views import same_addresses, view_of
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.runtime.device import ExecutionContext

ALIGNMENT = 256  # bytes: an alias starts where an arena tensor could (memory_plan.ALIGNMENT)


@attrs.frozen
class Views:
    parents: dict[int, tuple[int, int]]  # aliased uid -> (uid whose memory it is part of, byte offset in it)
    nodes: frozenset[int]  # indices of the nodes that run no step


NO_VIEWS = Views({}, frozenset())


class ViewPlan(NodePlan):
    """A view's step: its output already is its input's memory (or its pieces' producers wrote it).

    ``launches = 0``: bound GPU plans and CUDA graphs leave such steps out.
    """

    launches = 0

    def execute(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> None:
        return None


class ViewBuilder(PlanBuilder):
    """The builder view steps are named by in plans and reports; never registered (the executor decides)."""

    name = "view"
    engine_id = 0
    library = "executor"
    ops = ("reshape", "transpose", "slice", "concatenate")

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        return ViewPlan()


VIEW = ViewBuilder()


def _aliasable(graph: Graph, a: Tensor, b: Tensor, inputs: frozenset[int] = frozenset()) -> bool:
    """b executor-owned, a too or one of the caller's ``inputs``, of one dtype (the graph's checks have made every
    stride >= 1)."""
    return (a.is_virtual or a.uid in inputs) and b.is_virtual and graph.dtype_of(a) == graph.dtype_of(b)


def _moved_view(graph: Graph, node: Node, inputs: frozenset[int]) -> tuple[int, int, int] | None:
    """(y, x, byte offset) when the reshape / transpose / slice ``node`` can alias y into x (or one of ``inputs``)."""
    x, y = graph.tensors[node.op.inputs()["x"]], graph.tensors[node.op.outputs()["y"]]
    view = view_of(node, x)
    if view is None or not _aliasable(graph, x, y, inputs) or not same_addresses(y.dims, y.strides, view[0]):
        return None
    offset = view[1] * graph.dtype_of(x).itemsize
    return (y.uid, x.uid, offset) if offset % ALIGNMENT == 0 else None


def _concatenated_views(graph: Graph, node: Node, parents: Mapping[int, Any]) -> list[tuple[int, int, int]] | None:
    """(piece, y, byte offset) for every piece when each can be written straight into its slice of y."""
    op = node.op
    y = graph.tensors[op.outputs()["y"]]
    pieces = [graph.tensors[uid] for uid in op.x]
    if len({p.uid for p in pieces}) != len(pieces) or not is_non_overlapping(y.dims, y.strides):
        return None
    found, at = [], 0
    for p in pieces:
        offset = at * y.strides[op.axis] * graph.dtype_of(y).itemsize
        if (
            p.uid in parents
            or not _aliasable(graph, p, y)
            or not same_addresses(p.dims, p.strides, y.strides)
            or offset % ALIGNMENT
        ):
            return None
        found.append((p.uid, y.uid, offset))
        at += p.dims[op.axis]
    return found


def plan_views(graph: Graph, order: Sequence[int], allowed: Callable[[int], bool], *, into_inputs: bool) -> Views:
    """Which nodes (of those ``allowed``) are views, and what their tensors alias, along ``order``
    (``into_inputs``: a moved view may alias a caller's input).

    A tensor aliases at most one other: a piece that already is a view, or
    a piece of another concatenate, keeps its concatenate a copy.
    """
    parents: dict[int, tuple[int, int]] = {}
    nodes = set()
    inputs = frozenset(t.uid for t in graph.inputs) if into_inputs else frozenset()
    for i in order:
        node = graph.nodes[i]
        kind = node.op.kind
        if kind not in VIEW.ops or not allowed(i):
            continue
        moved = kind != "concatenate"
        found = _moved_view(graph, node, inputs) if moved else _concatenated_views(graph, node, parents)
        if found is None:
            continue
        for child, parent, offset in found if isinstance(found, list) else [found]:
            parents[child] = (parent, offset)
        nodes.add(i)
    return Views(parents, frozenset(nodes))
