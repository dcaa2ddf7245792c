"""Regions: connected, convex sets of nodes that one fusion builder runs as one step.

A region's entry tensors are what it reads from outside, its exit tensors
what is read outside it or is a graph output; tensors written and read only
inside it are internal and never allocated. Its pattern key — the nodes'
signature keys plus how they connect — is the same for every region with the
same shape of computation, so one compiled kernel serves them all.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.signature_keys import SignatureKey, key_for


class Dataflow:
    """Who writes and who reads each tensor, and each node's position in an execution order."""

    def __init__(self, graph: Graph, order: Sequence[int]) -> None:
        self.graph = graph
        self.position = {node: pos for pos, node in enumerate(order)}
        self.producer: dict[int, int] = {}
        self.readers: dict[int, list[int]] = {}
        for i, node in enumerate(graph.nodes):
            for uid in node.op.outputs().values():
                self.producer[uid] = i
            for uid in dict.fromkeys(node.op.inputs().values()):
                self.readers.setdefault(uid, []).append(i)

    def successors(self, i: int) -> list[int]:
        return [r for uid in self.graph.nodes[i].op.outputs().values() for r in self.readers.get(uid, ())]

    def predecessors(self, i: int) -> list[int]:
        ins = self.graph.nodes[i].op.inputs().values()
        return [self.producer[u] for u in dict.fromkeys(ins) if u in self.producer]


@attrs.frozen
class Region:
    nodes: tuple[int, ...]  # node indices, in execution order
    entries: tuple[int, ...]  # uids read from outside the region
    exits: tuple[int, ...]  # uids read outside the region or graph outputs
    internal: tuple[int, ...]  # uids written and read only inside: never allocated
    pattern: tuple[Any, ...]  # hashable: node keys + internal edges + where entries go + where exits come from

    def node_list(self, graph: Graph) -> list[Node]:
        return [graph.nodes[i] for i in self.nodes]


def is_convex(flow: Dataflow, members: set[int]) -> bool:
    """No path leaves the set and comes back: follow every edge out, up to the set's last position."""
    last = max(flow.position[i] for i in members)
    frontier = [s for i in members for s in flow.successors(i) if s not in members]
    seen: set[int] = set()
    while frontier:
        j = frontier.pop()
        if j in seen or flow.position[j] > last:
            continue
        seen.add(j)
        for s in flow.successors(j):
            if s in members:
                return False
            frontier.append(s)
    return True


def _is_connected(flow: Dataflow, members: set[int]) -> bool:
    start = next(iter(members))
    seen, frontier = {start}, [start]
    while frontier:
        i = frontier.pop()
        for j in (*flow.successors(i), *flow.predecessors(i)):
            if j in members and j not in seen:
                seen.add(j)
                frontier.append(j)
    return seen == members


def make_region(flow: Dataflow, nodes: Iterable[int], keys: Sequence[SignatureKey] | None = None) -> Region:
    """The region of ``nodes``; GraphError unless they are connected and convex."""
    graph = flow.graph
    members = set(nodes)
    if not members:
        raise GraphError("a region needs at least one node")
    names = sorted(graph.nodes[i].name for i in members)
    if not _is_connected(flow, members):
        raise GraphError(f"region {names} is not connected")
    if not is_convex(flow, members):
        raise GraphError(f"region {names} is not convex: a path leaves it and comes back")
    ordered = sorted(members, key=flow.position.__getitem__)
    local = {node: pos for pos, node in enumerate(ordered)}
    written = {uid: (local[i], port) for i in ordered for port, uid in graph.nodes[i].op.outputs().items()}
    entries: dict[int, None] = {}
    edges, feeds = [], []
    for i in ordered:
        for port, uid in graph.nodes[i].op.inputs().items():
            if uid in written:
                edges.append((*written[uid], local[i], port))
            else:
                entries.setdefault(uid)
                feeds.append((list(entries).index(uid), local[i], port))
    exits, internal = [], []
    for uid in written:
        outside = any(r not in members for r in flow.readers.get(uid, ()))
        (exits if outside or not graph.tensors[uid].is_virtual else internal).append(uid)
    keys = tuple(keys) if keys is not None else tuple(key_for(graph.nodes[i], graph) for i in ordered)
    pattern = (keys, tuple(edges), tuple(feeds), tuple(written[u] for u in exits))
    return Region(tuple(ordered), tuple(entries), tuple(exits), tuple(internal), pattern)


def grow_regions(flow: Dataflow, order: Sequence[int], accept: Callable[[int], bool]) -> list[list[int]]:
    """Maximal connected, convex groups of accepted nodes, grown along the execution order.

    Each accepted node joins the group of an accepted producer when the
    group stays convex (groups of two producers merge when they can), else
    starts its own. Groups of one node are returned too; a builder drops
    those it does not want.
    """
    group_of: dict[int, int] = {}
    members: dict[int, set[int]] = {}
    for i in order:
        if not accept(i):
            continue
        current, current_id = {i}, None
        for p in flow.predecessors(i):
            g = group_of.get(p)
            if g is None or g == current_id:
                continue
            candidate = current | members[g]
            if not is_convex(flow, candidate):
                continue
            if current_id is not None:
                del members[current_id]
            members[g] = candidate
            for m in candidate:
                group_of[m] = g
            current, current_id = candidate, g
        if current_id is None:
            group_of[i] = i
            members[i] = {i}
    return [sorted(g, key=flow.position.__getitem__) for g in members.values()]
