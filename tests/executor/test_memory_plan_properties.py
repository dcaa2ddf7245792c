"""Memory plan and step order over random DAGs, against oracles written from the definitions.

A wrong memory plan is a silent wrong answer on every backend, so the free
list is checked against a model of the arena (the free blocks must be exactly
the gaps between live blocks below the top, coalesced; an allocation takes
the smallest gap that fits, lowest offset first, else the top), and
``plan_memory`` against liveness computed from the steps: no two tensors live
at the same step share a byte, every view fits the arena, and the peak lies
between the largest live set and the no-reuse total.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import sigdnn
from sigdnn.dtypes import DataType
from sigdnn.executor import plan_memory
from sigdnn.executor.memory_plan import _FreeList
from sigdnn.executor.schedule import arrival_order, memory_aware_order
from sigdnn.graph import check_graph

ALIGN = 256


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


# -- the free list against a model of the arena --------------------------------
def gaps(live: dict[int, int], top: int) -> list[tuple[int, int]]:
    """(offset, size) of the free stretches below ``top``, given live blocks offset -> size."""
    free, at = [], 0
    for offset in sorted(live):
        if offset > at:
            free.append((at, offset - at))
        at = max(at, offset + live[offset])
    if top > at:
        free.append((at, top - at))
    return free


def free_blocks(fl: _FreeList) -> list[tuple[int, int]]:
    blocks = sorted(fl.by_offset.items())
    assert sorted(fl.by_size) == sorted((s, o) for o, s in blocks)
    assert fl.by_end == {o + s: o for o, s in blocks}
    return blocks


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(1, 12), st.integers(0, 10**6)), min_size=1, max_size=60))
def test_free_list_is_best_fit_with_splitting_and_coalescing(ops: list[tuple[bool, int, int]]) -> None:
    fl = _FreeList()
    live: dict[int, int] = {}
    peak = 0
    for allocate, units, pick in ops:
        if allocate or not live:
            size = units * ALIGN
            fitting = [(s, o) for o, s in gaps(live, fl.top) if s >= size]
            want = min(fitting)[1] if fitting else max((o + s for o, s in live.items()), default=0)
            offset = fl.allocate(size)
            assert offset == want, (sorted(live.items()), size)
            assert all(offset + size <= o or o + s <= offset for o, s in live.items())
            live[offset] = size
        else:
            offset = sorted(live)[pick % len(live)]
            fl.release(offset, live.pop(offset))
        top = max((o + s for o, s in live.items()), default=0)
        peak = max(peak, top)
        assert fl.top == top
        assert fl.peak == peak
        assert free_blocks(fl) == gaps(live, top)  # coalesced: no two free blocks touch


def test_free_list_splits_the_best_fit_and_merges_both_neighbours() -> None:
    fl = _FreeList()
    a, b, c, d, e = (fl.allocate(n) for n in (512, 256, 768, 256, 256))
    assert (a, b, c, d, e) == (0, 512, 768, 1536, 1792)
    fl.release(a, 512)
    fl.release(c, 768)
    assert free_blocks(fl) == [(0, 512), (768, 768)]
    assert fl.allocate(256) == 0  # the smallest block that fits, split
    assert free_blocks(fl) == [(256, 256), (768, 768)]
    assert fl.allocate(512) == 768  # 256 is too small: next best fit
    assert free_blocks(fl) == [(256, 256), (1280, 256)]
    fl.release(b, 256)  # merges with the free block before it
    assert free_blocks(fl) == [(256, 512), (1280, 256)]
    fl.release(768, 512)  # merges with both neighbours
    assert free_blocks(fl) == [(256, 1280)]
    fl.release(e, 256)  # the top block: the top comes down instead
    assert (fl.top, fl.peak) == (2048 - 256, 2048)
    fl.release(d, 256)  # ends at the top and touches the big free block: all of it is the top again
    assert (fl.top, free_blocks(fl)) == (256, [])
    assert fl.allocate(4096) == 256 and fl.peak == 256 + 4096


# -- plan_memory over random steps ---------------------------------------------
DTYPES = [DataType.FLOAT32, DataType.FLOAT16, DataType.INT8, DataType.FLOAT64, DataType.BOOL]


@st.composite
def step_programs(draw: st.DrawFn) -> tuple[sigdnn.Graph, list[tuple[list[int], list[int]]]]:
    """A graph's tensors and steps over them: each step reads earlier tensors and writes 1-3 new ones."""
    g = sigdnn.Graph("random", io_dtype="float32")
    available = [g.tensor(f"in{i}", (draw(st.integers(1, 300)),)).uid for i in range(draw(st.integers(1, 3)))]
    steps = []
    for s in range(draw(st.integers(1, 14))):
        reads = draw(st.lists(st.sampled_from(available), min_size=1, max_size=4))
        writes = []
        for w in range(draw(st.integers(1, 3))):
            dims = draw(st.lists(st.integers(1, 40), min_size=1, max_size=3))
            strides = None
            if draw(st.booleans()):  # padded rows: the span, not the element count, takes memory
                strides = [math.prod(dims[k + 1 :]) * (1 + draw(st.integers(0, 3))) for k in range(len(dims))]
            dtype = draw(st.sampled_from(DTYPES))
            virtual = draw(st.integers(0, 4)) > 0
            t = g.tensor(f"t{s}_{w}", dims, strides, dtype=dtype, is_virtual=virtual)
            writes.append(t.uid)
        available.extend(writes)
        steps.append((reads, writes))
    return g, steps


def span_bytes(t: sigdnn.Tensor, dtype: DataType) -> int:
    return (1 + sum((d - 1) * s for d, s in zip(t.dims, t.strides))) * np.dtype(dtype.numpy).itemsize


@settings(max_examples=150, deadline=None)
@given(step_programs())
def test_plan_memory_never_overlaps_live_tensors(program) -> None:
    g, steps = program
    mem = plan_memory(g, steps)
    virtual = {uid for _, writes in steps for uid in writes if g.tensors[uid].is_virtual}
    assert set(mem.offsets) == virtual == set(mem.sizes)
    first = {uid: s for s, (_, writes) in enumerate(steps) for uid in writes}
    last = {uid: s for s, (reads, writes) in enumerate(steps) for uid in (*reads, *writes)}
    for uid in virtual:
        t = g.tensors[uid]
        assert mem.sizes[uid] == aligned(span_bytes(t, t.dtype))
        assert mem.offsets[uid] % ALIGN == 0
        assert mem.offsets[uid] >= 0 and mem.offsets[uid] + mem.sizes[uid] <= mem.peak_bytes
    largest_live = 0
    for s in range(len(steps)):
        live = [u for u in virtual if first[u] <= s <= last[u]]
        largest_live = max(largest_live, sum(mem.sizes[u] for u in live))
        for u, v in itertools.combinations(live, 2):
            lo_u, lo_v = mem.offsets[u], mem.offsets[v]
            assert lo_u + mem.sizes[u] <= lo_v or lo_v + mem.sizes[v] <= lo_u, (s, g.tensors[u].name, g.tensors[v].name)
    assert mem.total_bytes == sum(mem.sizes.values())
    assert largest_live <= mem.peak_bytes <= mem.total_bytes


def test_a_step_writing_an_input_before_a_virtual_tensor_allocates_the_virtual_one() -> None:
    g = sigdnn.Graph("mixed", io_dtype="float32")
    x = g.tensor("x", (10,))
    y = g.tensor("y", (10,))
    v = g.tensor("v", (10,), is_virtual=True)
    mem = plan_memory(g, [([x.uid], [y.uid, v.uid]), ([v.uid], [])])
    assert mem.offsets == {v.uid: 0} and mem.peak_bytes == ALIGN


def test_a_freed_block_is_reused_exactly_and_sizes_are_rounded_up_once() -> None:
    g = sigdnn.Graph("reuse", io_dtype="float32")
    x = g.tensor("x", (1,))
    a = g.tensor("a", (64,), dtype="float32", is_virtual=True)  # 256 bytes: already aligned
    b = g.tensor("b", (65,), dtype="float32", is_virtual=True)  # 260 -> 512
    c = g.tensor("c", (1,), dtype="int8", is_virtual=True)  # 1 -> 256
    d = g.tensor("d", (64,), dtype="float32", is_virtual=True)
    steps = [([x.uid], [a.uid]), ([a.uid], [b.uid]), ([b.uid], [c.uid]), ([c.uid], [d.uid]), ([d.uid], [])]
    mem = plan_memory(g, steps)
    assert mem.sizes == {a.uid: 256, b.uid: 512, c.uid: 256, d.uid: 256}
    assert mem.offsets == {a.uid: 0, b.uid: 256, c.uid: 0, d.uid: 256}
    assert (mem.peak_bytes, mem.total_bytes) == (768, 1280)


def test_a_tensor_lives_until_its_last_reader_not_its_first() -> None:
    g = sigdnn.Graph("long", io_dtype="float32")
    x = g.tensor("x", (64,))
    a, b, c = (g.tensor(n, (64,), is_virtual=True) for n in "abc")
    steps = [([x.uid], [a.uid]), ([a.uid], [b.uid]), ([b.uid], [c.uid]), ([a.uid, c.uid], [])]
    mem = plan_memory(g, steps)
    # a is still live when c is written (b too: c's writer reads it), so c takes a third block.
    assert mem.offsets == {a.uid: 0, b.uid: ALIGN, c.uid: 2 * ALIGN}
    assert mem.peak_bytes == 3 * ALIGN


# -- the step order -------------------------------------------------------------
def greedy_order(reads, writes, rank, sizes) -> list[int]:
    """The schedule's definition, recomputed naively: among the ready units, the one that frees the most
    bytes net of what it allocates (a read frees its tensor when no other unfinished unit reads it); ties
    by rank."""
    n = len(reads)
    producer = {uid: u for u in range(n) for uid in writes[u]}
    done: list[int] = []
    while len(done) < n:
        ready = [u for u in range(n) if u not in done and all(producer.get(t, -1) in done or t not in producer
                                                             for t in reads[u])]  # fmt: skip

        def score(u: int) -> int:
            freed = sum(
                sizes.get(t, 0)
                for t in set(reads[u])
                if not any(t in reads[r] for r in range(n) if r != u and r not in done)
            )
            return freed - sum(sizes.get(t, 0) for t in writes[u])

        done.append(min(ready, key=lambda u: (-score(u), rank[u])))
    return done


@st.composite
def units(draw: st.DrawFn):
    n = draw(st.integers(1, 12))
    reads: list[list[int]] = []
    writes: list[list[int]] = []
    available = [1000, 1001]  # graph inputs: no producer, cost nothing
    sizes = {}
    for u in range(n):
        reads.append(draw(st.lists(st.sampled_from(available), min_size=1, max_size=3)))
        outs = [10 * u + k for k in range(draw(st.integers(1, 2)))]
        for uid in outs:
            if draw(st.booleans()):
                sizes[uid] = draw(st.sampled_from([256, 512, 4096]))
        writes.append(outs)
        available.extend(outs)
    rank = draw(st.permutations(range(n)))
    # Units arrive shuffled: the order must come from the dataflow, not the list.
    perm = draw(st.permutations(range(n)))
    return [reads[p] for p in perm], [writes[p] for p in perm], [rank[p] for p in perm], sizes


@settings(max_examples=200, deadline=None)
@given(units())
def test_memory_aware_order_is_the_greedy_topological_order(program) -> None:
    reads, writes, rank, sizes = program
    order = memory_aware_order(reads, writes, rank, sizes)
    assert sorted(order) == list(range(len(reads)))
    position = {u: p for p, u in enumerate(order)}
    producer = {uid: u for u in range(len(reads)) for uid in writes[u]}
    for u in range(len(reads)):
        assert all(position[producer[t]] < position[u] for t in reads[u] if t in producer)
    assert order == greedy_order(reads, writes, rank, sizes)


@settings(max_examples=50, deadline=None)
@given(units())
def test_without_sizes_the_order_is_kahns_by_rank(program) -> None:
    reads, writes, rank, _ = program
    assert memory_aware_order(reads, writes, rank, {}) == greedy_order(reads, writes, rank, {})


def breadth_first(branches: int, n: int = 1024) -> sigdnn.Graph:
    """Every branch's big first node, then every branch's small second node: arrival order holds them all."""
    g = sigdnn.Graph("wide", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", (n,))
    big = [g.pointwise("exp", x, name=f"big{i}") for i in range(branches)]
    for i, t in enumerate(big):
        g.pointwise("abs", t, name=f"small{i}").set_output(True).set_name(f"y{i}")
    return g


def test_a_breadth_first_graph_runs_depth_first_at_a_lower_peak() -> None:
    g = breadth_first(6)
    order = check_graph(g)
    assert [g.nodes[i].name for i in order][:6] == [f"big{i}" for i in range(6)]  # arrival order
    arrival = plan_memory(g, [(list(g.nodes[i].op.inputs().values()), list(g.nodes[i].op.outputs().values()))
                              for i in order])  # fmt: skip
    plan = sigdnn.Executor().prepare(g)
    assert [s.name for s in plan.steps] == [f"{k}{i}" for i in range(6) for k in ("big", "small")]
    assert arrival.peak_bytes == 6 * 4096
    assert plan.peak_intermediate_bytes == 4096
    x = np.linspace(-3, 3, 1024, dtype=np.float32)
    got = sigdnn.Executor().execute(plan, {"x": x})
    want = np.abs(np.exp(x.astype(np.float64)).astype(np.float32))
    for i in range(6):
        np.testing.assert_array_equal(got[f"y{i}"], want)


@settings(max_examples=100, deadline=None)
@given(units())
def test_arrival_order_is_kahns_by_rank(program) -> None:
    reads, writes, rank, _ = program
    assert arrival_order(reads, writes, rank) == greedy_order(reads, writes, rank, {})


def two_reductions() -> sigdnn.Graph:
    """A big tensor read by two reductions, each feeding an output: greedy runs the second reduction while the
    first one's result is live (it frees the big tensor), arrival order first lets that result's reader free it."""
    g = sigdnn.Graph("two_reductions", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", (16, 256))
    big = g.pointwise("add", x, x, name="big")
    first = g.reduction(big, "add", (1, 256), name="first")
    g.pointwise("neg", first, name="neg").set_output(True).set_name("y0")
    second = g.reduction(big, "add", (1, 256), name="second")
    g.pointwise("abs", second, name="abs").set_output(True).set_name("y1")
    return g


def node_peaks(g: sigdnn.Graph) -> tuple[int, int]:
    """The peaks of the graph's greedy and arrival orders (the oracles above), node by node (the reference)."""
    order = check_graph(g)
    reads = [list(g.nodes[i].op.inputs().values()) for i in order]
    writes = [list(g.nodes[i].op.outputs().values()) for i in order]
    sizes = {uid: aligned(t.size * 4) for uid, t in g.tensors.items() if t.is_virtual}
    rank = list(range(len(order)))
    return tuple(
        plan_memory(g, [(reads[u], writes[u]) for u in run]).peak_bytes
        for run in (greedy_order(reads, writes, rank, sizes), greedy_order(reads, writes, rank, {}))
    )


def test_prepare_keeps_the_arrival_order_where_it_peaks_lower() -> None:
    g = two_reductions()
    assert node_peaks(g) == (16 * 1024 + 2 * 1024, 16 * 1024 + 1024)
    plan = sigdnn.Executor().prepare(g)
    assert [s.name for s in plan.steps] == ["big", "first", "neg", "second", "abs"]
    assert plan.peak_intermediate_bytes == 16 * 1024 + 1024
    x = np.linspace(-1, 1, 16 * 256, dtype=np.float32).reshape(16, 256)
    got = sigdnn.Executor().execute(plan, {"x": x})
    column = (2 * x.astype(np.float64)).sum(axis=0, keepdims=True)
    np.testing.assert_array_equal(got["y0"], (-column).astype(np.float32))
    np.testing.assert_array_equal(got["y1"], np.abs(column).astype(np.float32))


@st.composite
def graphs(draw: st.DrawFn) -> sigdnn.Graph:
    """Random pointwise / reduction graphs over one (16, 256) input: full-size and (1, 256) intermediates."""
    g = sigdnn.Graph("random", io_dtype="float32", intermediate_dtype="float32")
    pool = [g.tensor("x", (16, 256))]
    for i in range(draw(st.integers(2, 9))):
        a = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(["unary", "add", "sum"]))
        if kind == "add":
            pool.append(g.pointwise("add", a, draw(st.sampled_from(pool)), name=f"n{i}"))
        elif kind == "sum" and a.dims[0] > 1:
            pool.append(g.reduction(a, "add", (1, 256), name=f"n{i}"))
        else:
            pool.append(g.pointwise("exp", a, name=f"n{i}"))
    read = {uid for node in g.nodes for uid in node.op.inputs().values()}
    for i, t in enumerate(pool[1:]):
        if t.uid not in read:
            t.set_output(True).set_name(f"y{i}")
    return g


@settings(max_examples=100, deadline=None)
@given(graphs())
def test_prepare_plans_the_lower_peak_of_the_greedy_and_arrival_orders(g: sigdnn.Graph) -> None:
    assert sigdnn.Executor().prepare(g).peak_intermediate_bytes == min(node_peaks(g))
