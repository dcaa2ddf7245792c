"""Views: reshape / transpose / slice / concatenate steps that run nothing, their outputs aliased into memory.

Random graphs of view chains and concatenates run bit-identical to the same
graph planned without views (``fusion=False``: every node its own step and
its own memory); the memory plan is checked against liveness recomputed
from the steps (a root's bytes are never shared while any tensor aliasing
it is live, every alias lies inside its root), and no tensor the caller owns
is ever an alias or aliased.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sigdnn
from sigdnn.executor.views import VIEW, ViewPlan
from sigdnn.graph.layout import is_non_overlapping
from sigdnn.graph.views import view_layout
from sigdnn.validation import random_inputs, validate


def prime_factors(n: int) -> list[int]:
    found, p = [], 2
    while n > 1:
        while n % p == 0:
            found.append(p)
            n //= p
        p += 1
    return found


@st.composite
def view_programs(draw: st.DrawFn) -> sigdnn.Graph:
    """A graph of pointwise ops, reshapes, transposes, slices (half declared as views) and concatenates."""
    dtype = draw(st.sampled_from(["float32", "float16"]))
    g = sigdnn.Graph("views", io_dtype=dtype, intermediate_dtype=dtype)
    dims = [draw(st.integers(1, 4)) for _ in range(draw(st.integers(0, 2)))]
    x = g.tensor("x", (*dims, draw(st.sampled_from([1, 3, 128, 128]))))
    pool = [x, g.neg(x)]
    for _ in range(draw(st.integers(1, 9))):
        t = draw(st.sampled_from(pool))
        kind = draw(st.sampled_from(["neg", "reshape", "transpose", "slice", "concat", "concat"]))
        if kind == "neg":
            y = g.neg(t)
        elif kind == "reshape":
            rank = draw(st.integers(1, 4))
            where = [draw(st.integers(0, rank - 1)) for _ in prime_factors(t.size)]
            shape = [math.prod(f for f, a in zip(prime_factors(t.size), where) if a == k) for k in range(rank)]
            y = g.reshape(t, shape)
        elif kind == "transpose":
            y = g.transpose(t, draw(st.permutations(range(t.rank))))
        elif kind == "slice":
            bounds = []
            for axis, d in enumerate(t.dims):
                a = 0 if axis == t.rank - 1 and draw(st.booleans()) else draw(st.integers(0, d - 1))
                bounds.append(slice(a, draw(st.integers(a + 1, d)), draw(st.integers(1, 2))))
            y = g.slice(t, bounds)
        else:
            axis = draw(st.integers(0, t.rank - 1))
            other = g.neg(t)
            pieces = [t, other] if draw(st.booleans()) else [other, t]
            y = g.concatenate(pieces, axis)
            if draw(st.booleans()):  # pieces laid out as their slices of y: the producers can write into y
                for p in pieces:
                    if p.is_virtual:
                        p.set_stride(y.strides)
        if kind in ("reshape", "transpose", "slice") and draw(st.booleans()):
            view_layout(g, y)
        if draw(st.integers(0, 5)) == 0 and is_non_overlapping(y.dims, y.strides):  # what an output may be
            y.set_output(True)
        pool.append(y)
    read = {uid for n in g.nodes for uid in n.op.inputs().values()}
    for t in pool[1:]:
        if t.uid not in read:
            (t if is_non_overlapping(t.dims, t.strides) else g.neg(t)).set_output(True)
    return g


def lifetimes(plan: sigdnn.ExecutionPlan) -> dict[int, tuple[int, int]]:
    """Each memory root's (first step writing any tensor of its group, last step touching one)."""
    roots = plan.memory.roots
    span: dict[int, tuple[int, int]] = {}
    for s, step in enumerate(plan.steps):
        for uid in (*step.reads, *step.writes):
            if uid not in plan.memory.offsets:
                continue
            root = roots.get(uid, uid)
            first, _ = span.get(root, (s if uid in step.writes else None, s))
            span[root] = (first, s)
    return span


def check_memory(plan: sigdnn.ExecutionPlan) -> None:
    g, mem = plan.graph, plan.memory
    for uid, root in mem.roots.items():
        assert g.tensors[uid].is_virtual and g.tensors[root].is_virtual  # the caller's tensors never alias
        t = g.tensors[uid]
        span = (1 + sum((d - 1) * s for d, s in zip(t.dims, t.strides))) * g.dtype_of(t).itemsize
        assert mem.offsets[root] <= mem.offsets[uid] and mem.offsets[uid] + span <= mem.offsets[root] + mem.sizes[root]
        assert mem.offsets[uid] % 256 == 0
    assert set(mem.sizes) == set(mem.offsets) - set(mem.roots)
    live = lifetimes(plan)
    for a in mem.sizes:
        for b in mem.sizes:
            if a < b and live[a][0] <= live[b][1] and live[b][0] <= live[a][1]:  # live at one step
                lo_a, lo_b = mem.offsets[a], mem.offsets[b]
                assert lo_a + mem.sizes[a] <= lo_b or lo_b + mem.sizes[b] <= lo_a, (
                    g.tensors[a].name,
                    g.tensors[b].name,
                )


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view_programs(), st.integers(0, 2**16))
def test_views_compute_bit_identical_results_and_never_share_live_memory(graph: sigdnn.Graph, seed: int) -> None:
    inputs = random_inputs(graph, seed=seed)
    plan = sigdnn.Executor().prepare(graph)
    check_memory(plan)
    got = sigdnn.Executor().execute(plan, inputs)
    want = sigdnn.Executor(fusion=False).run(graph, inputs)
    assert got.keys() == want.keys()
    for name in want:
        assert got[name].dtype == want[name].dtype
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    # a second run on the kept arena: nothing a view reads was left stale by the first
    again = sigdnn.Executor().execute(plan, random_inputs(graph, seed=seed + 1))
    for name, value in sigdnn.Executor(fusion=False).run(graph, random_inputs(graph, seed=seed + 1)).items():
        np.testing.assert_array_equal(again[name], value, err_msg=name)


def head_split() -> tuple[sigdnn.Graph, sigdnn.Tensor, sigdnn.Tensor]:
    """x [2, 4, 128] -> neg -> reshape [2, 4, 2, 64] -> transpose [2, 2, 4, 64] (a view) -> neg."""
    g = sigdnn.Graph("heads", io_dtype="float32", intermediate_dtype="float32")
    a = g.neg(g.tensor("x", (2, 4, 128)))
    t = view_layout(g, g.transpose(g.reshape(a, (2, 4, 2, 64)), (0, 2, 1, 3)))
    g.neg(t).set_output(True)
    return g, a, t


def test_a_head_split_runs_no_step_and_describe_says_so() -> None:
    g, a, t = head_split()
    plan = sigdnn.Executor().prepare(g)
    views = [s for s in plan.steps if s.builder is VIEW]
    assert [s.node.op.kind for s in views] == ["reshape", "transpose"]
    assert all(isinstance(s.plan, ViewPlan) and s.plan.launches == 0 for s in views)
    assert plan.memory.roots == {t.uid: a.uid, g.nodes[1].op.y: a.uid}
    assert plan.memory.offsets[t.uid] == plan.memory.offsets[a.uid]
    text = plan.describe()
    assert f"-> view (0 launches: {t.name} in {a.name})" in text
    assert "; 2 views" in text
    assert validate(g, backend="reference").passed


def test_a_viewed_buffer_stays_allocated_until_the_view_is_read_for_the_last_time() -> None:
    g = sigdnn.Graph("long", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", (64, 64))
    a = g.neg(x)
    v = view_layout(g, g.transpose(a, (1, 0), name="t"))
    b = g.neg(x)
    for _ in range(4):  # a chain that would reuse a's bytes if a died with its last direct reader
        b = g.neg(b)
    g.add(v, b).set_output(True)
    plan = sigdnn.Executor().prepare(g)
    check_memory(plan)
    order = [s.name for s in plan.steps]
    assert order.index("t") < order.index(g.nodes[-2].name)  # the chain ran while the view was live
    inputs = random_inputs(g, seed=3)
    np.testing.assert_array_equal(
        sigdnn.Executor().execute(plan, inputs)[g.outputs[0].name], -inputs["x"].T - inputs["x"]
    )


def test_a_slice_aliases_at_its_offset_and_a_misaligned_slice_is_a_copy() -> None:
    g = sigdnn.Graph("slices", io_dtype="float32", intermediate_dtype="float32")
    a = g.neg(g.tensor("x", (4, 64)))
    rows = view_layout(g, g.slice(a, [slice(1, 3)]))
    cols = view_layout(g, g.slice(a, [slice(None), slice(1, 64)]))
    g.neg(rows).set_output(True)
    g.neg(cols).set_output(True)
    plan = sigdnn.Executor().prepare(g)
    assert plan.memory.offsets[rows.uid] == plan.memory.offsets[a.uid] + 256
    assert rows.uid in plan.memory.roots and cols.uid not in plan.memory.offsets.keys() & plan.memory.roots.keys()
    assert {s.name: s.builder.name for s in plan.steps}["slice_2"] == "reference.slice"


def test_a_copy_planned_first_leaves_later_views_views() -> None:
    g = sigdnn.Graph("order", io_dtype="float32", intermediate_dtype="float32")
    a = g.neg(g.tensor("x", (4, 64)))
    g.neg(g.transpose(a, (1, 0), name="copy")).set_output(True)  # packed strides: a copy
    g.neg(view_layout(g, g.transpose(a, (1, 0), name="view"))).set_output(True)
    plan = sigdnn.Executor().prepare(g)
    assert {s.name: s.builder.name for s in plan.steps if s.name in ("copy", "view")} == {
        "copy": "reference.transpose",
        "view": "view",
    }
    listed = {s["name"]: s for s in plan.as_dict()["steps"]}["view"]
    assert (listed["builder"], listed["engine_id"]) == ("view", 0)  # what `sigdnn inspect --json` shows


def concat_graph(axis: int, piece_dims: tuple[tuple[int, ...], ...], lay_out: bool = True) -> sigdnn.Graph:
    g = sigdnn.Graph("cat", io_dtype="float32", intermediate_dtype="float32")
    pieces = [g.neg(g.tensor(f"x{i}", d)) for i, d in enumerate(piece_dims)]
    y = g.concatenate(pieces, axis)
    if lay_out:
        for p in pieces:
            p.set_stride(y.strides)
    g.neg(y).set_output(True)
    return g


def test_concatenate_producers_write_into_their_slices_of_the_output() -> None:
    g = concat_graph(0, ((2, 64), (3, 64), (1, 64)))
    plan = sigdnn.Executor().prepare(g)
    y = g.nodes[3].op.y
    pieces = g.nodes[3].op.x
    mem = plan.memory
    assert [mem.offsets[p] - mem.offsets[y] for p in pieces] == [0, 512, 1280]
    assert all(mem.roots[p] == y for p in pieces) and mem.sizes[y] == 6 * 256
    step = next(s for s in plan.steps if s.node.op.kind == "concatenate")
    assert step.builder is VIEW
    assert "neg_0::out_0 in concatenate_3::y" in plan.describe()
    inputs = random_inputs(g, seed=1)
    want = -np.concatenate([-inputs["x0"], -inputs["x1"], -inputs["x2"]])
    np.testing.assert_array_equal(sigdnn.Executor().execute(plan, inputs)[g.outputs[0].name], want)


def test_concatenate_across_columns_aliases_once_the_pieces_are_laid_out_as_slices() -> None:
    g = concat_graph(1, ((2, 64), (2, 128)))
    mem = sigdnn.Executor().prepare(g).memory
    y, (a, b) = g.nodes[2].op.y, g.nodes[2].op.x
    assert (mem.offsets[a] - mem.offsets[y], mem.offsets[b] - mem.offsets[y]) == (0, 256)
    assert not sigdnn.Executor().prepare(concat_graph(1, ((2, 64), (2, 128)), lay_out=False)).memory.roots


@pytest.mark.parametrize("change", ["duplicate", "io_piece", "viewed_piece", "dtype", "output", "misaligned"])
def test_a_concatenate_whose_pieces_cannot_all_alias_is_a_copy(change: str) -> None:
    g = sigdnn.Graph("cat", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", (2, 64))
    a, b = g.neg(x), g.neg(x)
    pieces = [a, b]
    if change == "duplicate":
        pieces = [a, a]
    elif change == "io_piece":
        pieces = [a, x]
    elif change == "viewed_piece":
        pieces = [a, view_layout(g, g.reshape(b, (2, 64)))]
    elif change == "dtype":
        b.set_data_type("float16")
    elif change == "misaligned":
        a, b = g.neg(g.tensor("w", (1, 3))), g.neg(g.tensor("z", (1, 3)))
        pieces = [a, b]
    y = g.concatenate(pieces, 0)
    if change == "output":
        y.set_output(True)
    else:
        g.neg(y).set_output(True)
    for p in pieces:
        if p.is_virtual and p.uid != getattr(g.nodes[-2].op, "y", None):
            p.set_stride(y.strides)
    plan = sigdnn.Executor().prepare(g)
    cat = next(s for s in plan.steps if s.node.op.kind == "concatenate")
    assert cat.builder.name == "reference.concatenate"
    assert y.uid not in plan.memory.roots.values()
    inputs = random_inputs(g, seed=2)
    for name, value in sigdnn.Executor(fusion=False).run(g, inputs).items():
        np.testing.assert_array_equal(sigdnn.Executor().execute(plan, inputs)[name], value)


@pytest.mark.parametrize("change", ["input", "output", "dtype", "strides", "pinned", "no_fusion"])
def test_a_transpose_that_cannot_alias_runs_its_builder(change: str) -> None:
    g = sigdnn.Graph("t", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", (64, 64))
    a = x if change == "input" else g.neg(x)
    t = view_layout(g, g.transpose(a, (1, 0), name="t"))
    if change == "output":
        t.set_output(True)
    else:
        g.neg(t).set_output(True)
    if change == "dtype":
        t.set_data_type("float16")
    elif change == "strides":
        t.set_stride((64, 1))
    executor = sigdnn.Executor(
        pins={"t": "reference.transpose"} if change == "pinned" else None, fusion=change != "no_fusion"
    )
    plan = executor.prepare(g)
    assert {s.name: s.builder.name for s in plan.steps}["t"] == "reference.transpose"
    assert not plan.memory.roots


def test_no_fusion_builder_claims_a_view_node() -> None:
    from sigdnn.registry import Dataflow, grow_regions, make_region
    from tests.executor.test_regions import ChainFusion

    class Everything(ChainFusion):  # claims every connected run of nodes, views included
        def claim(self, graph, order, device):  # type: ignore[no-untyped-def]
            flow = Dataflow(graph, order)
            return [make_region(flow, group) for group in grow_regions(flow, order, lambda i: True)]

    registry = sigdnn.Registry(entry_point_group=None)
    registry.register(Everything())
    g, _, _ = head_split()
    plan = sigdnn.Executor(registry=registry).prepare(g)
    assert [s.builder.name for s in plan.steps] == ["reference.pointwise", "view", "view", "reference.pointwise"]
    assert sigdnn.Executor(registry=registry, fusion=False).prepare(g).steps[1].builder.name == "reference.reshape"
