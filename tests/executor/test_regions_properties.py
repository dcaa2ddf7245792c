"""Regions on random small DAGs against brute force: convexity by transitive closure, connectivity by search.

make_region must accept exactly the connected convex node sets, and
classify every tensor it touches as the definitions say; grow_regions must
return disjoint connected convex groups that cover the accepted nodes.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.graph import check_graph
from sigdnn.registry import Dataflow, grow_regions, make_region
from sigdnn.registry.regions import is_convex


@st.composite
def dags(draw: st.DrawFn) -> sigdnn.Graph:
    """Pointwise nodes over earlier tensors (unary or binary), some outputs non-virtual, nodes shuffled."""
    g = sigdnn.Graph("dag", io_dtype="float32", intermediate_dtype="float32")
    tensors = [g.tensor(f"x{i}", (4,)) for i in range(draw(st.integers(1, 2)))]
    for i in range(draw(st.integers(1, 8))):
        if draw(st.booleans()):
            a, b = draw(st.sampled_from(tensors)), draw(st.sampled_from(tensors))
            t = g.pointwise("add", a, b, name=f"n{i}")
        else:
            t = g.pointwise("neg", draw(st.sampled_from(tensors)), name=f"n{i}")
        if draw(st.integers(0, 3)) == 0:
            t.set_output(True)
        tensors.append(t)
    return g


def edges(g: sigdnn.Graph) -> set[tuple[int, int]]:
    producer = {uid: i for i, n in enumerate(g.nodes) for uid in n.op.outputs().values()}
    return {(producer[uid], j) for j, n in enumerate(g.nodes) for uid in n.op.inputs().values() if uid in producer}


def reachable(g: sigdnn.Graph) -> set[tuple[int, int]]:
    """(a, b) when a path of one or more edges leads from node a to node b (Warshall)."""
    n = len(g.nodes)
    reach = [[False] * n for _ in range(n)]
    for a, b in edges(g):
        reach[a][b] = True
    for k, i, j in itertools.product(range(n), repeat=3):
        reach[i][j] = reach[i][j] or (reach[i][k] and reach[k][j])
    return {(i, j) for i in range(n) for j in range(n) if reach[i][j]}


def brute_convex(g: sigdnn.Graph, members: set[int], reach: set[tuple[int, int]]) -> bool:
    outside = set(range(len(g.nodes))) - members
    return not any((a, c) in reach and (c, b) in reach for a in members for b in members for c in outside)


def brute_connected(g: sigdnn.Graph, members: set[int]) -> bool:
    links = {(a, b) for a, b in edges(g) if a in members and b in members}
    seen, frontier = {min(members)}, [min(members)]
    while frontier:
        i = frontier.pop()
        for a, b in links:
            for j in (b,) if a == i else (a,) if b == i else ():
                if j not in seen:
                    seen.add(j)
                    frontier.append(j)
    return seen == members


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_make_region_accepts_exactly_the_connected_convex_sets(g: sigdnn.Graph, data: st.DataObject) -> None:
    order = check_graph(g)
    flow = Dataflow(g, order)
    reach = reachable(g)
    members = set(data.draw(st.lists(st.sampled_from(range(len(g.nodes))), min_size=1, max_size=len(g.nodes))))
    convex, connected = brute_convex(g, members, reach), brute_connected(g, members)
    assert is_convex(flow, members) == convex
    if not connected:
        with pytest.raises(GraphError, match="is not connected"):
            make_region(flow, members)
        return
    if not convex:
        with pytest.raises(GraphError, match="is not convex"):
            make_region(flow, members)
        return
    region = make_region(flow, members)
    position = {node: p for p, node in enumerate(order)}
    assert list(region.nodes) == sorted(members, key=position.__getitem__)
    assert region.node_list(g) == [g.nodes[i] for i in region.nodes]
    written = {uid for i in members for uid in g.nodes[i].op.outputs().values()}
    read_inside = [uid for i in region.nodes for uid in g.nodes[i].op.inputs().values()]
    assert list(region.entries) == list(dict.fromkeys(u for u in read_inside if u not in written))
    read_outside = {uid for j, n in enumerate(g.nodes) if j not in members for uid in n.op.inputs().values()}
    exits = {u for u in written if u in read_outside or not g.tensors[u].is_virtual}
    assert set(region.exits) == exits
    assert set(region.internal) == written - exits
    assert len(region.exits) + len(region.internal) == len(written)


def test_make_region_refuses_an_empty_set() -> None:
    g = sigdnn.Graph("one", io_dtype="float32")
    g.pointwise("neg", g.tensor("x", (4,)), name="n").set_output(True)
    with pytest.raises(GraphError, match="at least one node"):
        make_region(Dataflow(g, [0]), [])


@settings(max_examples=150, deadline=None)
@given(dags(), st.data())
def test_grow_regions_gives_disjoint_connected_convex_groups_covering_the_accepted_nodes(
    g: sigdnn.Graph, data: st.DataObject
) -> None:
    order = check_graph(g)
    flow = Dataflow(g, order)
    reach = reachable(g)
    accepted = data.draw(st.sets(st.sampled_from(range(len(g.nodes)))))
    groups = grow_regions(flow, order, accepted.__contains__)
    position = {node: p for p, node in enumerate(order)}
    assert sorted(i for grp in groups for i in grp) == sorted(accepted)
    for grp in groups:
        assert grp == sorted(grp, key=position.__getitem__)
        assert brute_connected(g, set(grp)) and brute_convex(g, set(grp), reach)
        make_region(flow, grp)  # and make_region agrees
    assert groups == greedy_groups(g, order, accepted, reach)


def greedy_groups(g: sigdnn.Graph, order: list[int], accepted: set[int], reach) -> list[list[int]]:
    """grow_regions' rule, naively: along the order, an accepted node joins each accepted producer's group
    (input ports in order) whose union with its current group is convex by brute force."""
    producer = {uid: i for i, n in enumerate(g.nodes) for uid in n.op.outputs().values()}
    groups: list[set[int]] = []
    for i in order:
        if i not in accepted:
            continue
        current = {i}
        preds = dict.fromkeys(producer[u] for u in g.nodes[i].op.inputs().values() if u in producer)
        for p in preds:
            other = next((grp for grp in groups if p in grp), None)
            if other is None or other is current or not brute_convex(g, current | other, reach):
                continue
            if current in groups:
                groups.remove(current)
            other |= current
            current = other
        if current == {i}:
            groups.append(current)
    position = {node: p for p, node in enumerate(order)}
    return [sorted(grp, key=position.__getitem__) for grp in groups]


def chain_graph(kinds: str) -> sigdnn.Graph:
    g = sigdnn.Graph("chain", io_dtype="float32", intermediate_dtype="float32")
    t = g.tensor("x", (4,))
    for i, k in enumerate(kinds):
        t = g.pointwise("neg" if k == "p" else "abs", t, name=f"{k}{i}")
    t.set_output(True)
    return g


def test_grow_regions_breaks_a_chain_at_rejected_nodes() -> None:
    g = chain_graph("ppapppap")
    order = check_graph(g)
    groups = grow_regions(Dataflow(g, order), order, lambda i: g.nodes[i].name.startswith("p"))
    assert sorted(groups) == [[0, 1], [3, 4, 5], [7]]


def test_grow_regions_merges_two_producers_groups_when_convex() -> None:
    g = sigdnn.Graph("join", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", (4,))
    a = g.pointwise("neg", g.pointwise("neg", x, name="a0"), name="a1")
    b = g.pointwise("neg", g.pointwise("neg", x, name="b0"), name="b1")
    g.pointwise("add", a, b, name="j").set_output(True)
    order = check_graph(g)
    assert grow_regions(Dataflow(g, order), order, lambda i: True) == [[0, 1, 2, 3, 4]]
    # A rejected node on one of two paths from a0 to the join keeps the join out of a0's group.
    g2 = sigdnn.Graph("join2", io_dtype="float32", intermediate_dtype="float32")
    x = g2.tensor("x", (4,))
    a0 = g2.pointwise("neg", x, name="a0")
    a = g2.pointwise("abs", a0, name="stop")
    b = g2.pointwise("neg", g2.pointwise("neg", a0, name="b0"), name="b1")
    g2.pointwise("add", a, b, name="j").set_output(True)
    order = check_graph(g2)
    names = [[g2.nodes[i].name for i in grp] for grp in
             grow_regions(Dataflow(g2, order), order, lambda i: g2.nodes[i].name != "stop")]  # fmt: skip
    assert sorted(names) == [["a0", "b0", "b1"], ["j"]]  # a0 -> stop -> j would leave and re-enter


@settings(max_examples=40, deadline=None)
@given(dags())
def test_every_subset_of_a_small_dag_is_judged_like_brute_force(g: sigdnn.Graph) -> None:
    order = check_graph(g)
    flow = Dataflow(g, order)
    reach = reachable(g)
    n = len(g.nodes)
    for mask in range(1, 1 << n):
        members = {i for i in range(n) if mask >> i & 1}
        assert is_convex(flow, members) is brute_convex(g, members, reach), sorted(members)


def test_a_long_path_out_and_back_makes_a_set_non_convex() -> None:
    g = sigdnn.Graph("detour", io_dtype="float32", intermediate_dtype="float32")
    a = g.pointwise("neg", g.tensor("x", (4,)), name="a")
    c = g.pointwise("abs", g.pointwise("abs", g.pointwise("abs", a, name="c1"), name="c2"), name="c3")
    g.pointwise("add", a, c, name="b").set_output(True)
    order = check_graph(g)
    flow = Dataflow(g, order)
    assert is_convex(flow, {0, 4}) is False
    assert is_convex(flow, {0, 1, 2, 3, 4}) is True and is_convex(flow, {1, 2, 3}) is True
    with pytest.raises(GraphError, match="not convex"):
        make_region(flow, [0, 4])


def test_a_node_joins_a_later_producer_when_the_first_would_break_convexity() -> None:
    g = sigdnn.Graph("select", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", (4,))
    a = g.pointwise("neg", x, name="a")
    b = g.pointwise("neg", x, name="b")
    s = g.pointwise("abs", a, name="s")  # rejected: a -> s -> j leaves {a, j} and comes back
    g.pointwise("binary_select", a, b, s, name="j").set_output(True)
    order = check_graph(g)
    groups = grow_regions(Dataflow(g, order), order, lambda i: g.nodes[i].name != "s")
    assert sorted([g.nodes[i].name for i in grp] for grp in groups) == [["a"], ["b", "j"]]


def pattern_of(build) -> tuple:
    g = sigdnn.Graph("p", io_dtype="float32", intermediate_dtype="float32")
    build(g, g.tensor("x", (4,)), g.tensor("y", (4,)))
    order = check_graph(g)
    return make_region(Dataflow(g, order), order).pattern


def test_the_pattern_tells_the_wiring_apart() -> None:
    def chain(g, x, y):
        g.pointwise("add", g.pointwise("neg", x, name="n"), y, name="s").set_output(True)

    def swapped(g, x, y):
        g.pointwise("add", y, g.pointwise("neg", x, name="n"), name="s").set_output(True)

    def same_entry_twice(g, x, y):
        g.pointwise("add", g.pointwise("neg", x, name="n"), x, name="s").set_output(True)

    def other_tensors(g, x, y):
        g.pointwise("add", g.pointwise("neg", y, name="m"), x, name="t").set_output(True)

    assert pattern_of(chain) == pattern_of(other_tensors)
    assert pattern_of(chain) != pattern_of(swapped)  # the internal edge enters another port
    assert pattern_of(chain) != pattern_of(same_entry_twice)  # where the entries go differs


def test_the_pattern_tells_internal_edges_apart_when_entries_agree() -> None:
    def first(g, x, y):
        g.pointwise("add", g.pointwise("neg", x, name="n"), g.pointwise("abs", x, name="a"), name="s").set_output(True)

    def second(g, x, y):
        n, a = g.pointwise("neg", x, name="n"), g.pointwise("abs", x, name="a")
        g.pointwise("add", a, n, name="s").set_output(True)

    assert pattern_of(first)[2] == pattern_of(second)[2]  # the same entries to the same ports
    assert pattern_of(first) != pattern_of(second)
