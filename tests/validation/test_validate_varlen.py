"""Validation of variable-length attention: unspecified padding is not compared, a wrong sequence is caught.

The "device" is a CPU plugin outranking the reference: it runs the
reference's plan and then either scribbles over what docs/ops.md leaves
unspecified (must pass) or computes with a boundary ignored (must fail).
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.graph.ops import ragged
from sigdnn.plan_builders.reference.sdpa import ReferenceSdpa, ReferenceSdpaBackward
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.validation import validate

B, H, S, D = 3, 2, 9, 4


def bshd(dims):
    _, h, s, e = dims
    return (s * h * e, e, h * e, 1)


def graph(ragged_layout: bool, backward: bool = False) -> sigdnn.Graph:
    g = sigdnn.Graph("varlen", io_dtype="float32", compute_dtype="float32")
    dims = (B, H, S, D)
    q, k, v = (g.tensor(n, dims, strides=bshd(dims)) for n in ("q", "k", "v"))
    lq, lkv = g.tensor("lq", (B, 1, 1, 1), dtype="int32"), g.tensor("lkv", (B, 1, 1, 1), dtype="int32")
    offs = {p: g.tensor(f"{p}_off", (B + 1, 1, 1, 1), dtype="int32") for p in "qkvo"} if ragged_layout else {}
    if backward:
        o, do = g.tensor("o", dims, strides=bshd(dims)), g.tensor("do", dims, strides=bshd(dims))
        st = g.tensor("st", (B, H, S, 1))
        outs = g.sdpa_backward(q, k, v, o, do, st, 0.5, seq_len_q=lq, seq_len_kv=lkv, ragged_offsets=offs, name="a")
    else:
        outs = g.sdpa(q, k, v, 0.5, None, False, True, seq_len_q=lq, seq_len_kv=lkv, ragged_offsets=offs, name="a")
    for i, t in enumerate(outs):
        t.set_output(True).set_name(f"out{i}")
    return g


class Scribbling(NodePlan):
    """The reference's results, then garbage wherever the op leaves the output unspecified."""

    def __init__(self, inner: NodePlan, node: Any, graph: Any) -> None:
        self.inner, self.node, self.graph = inner, node, graph

    def execute(self, buffers: Any, context: Any = None) -> None:
        self.inner.execute(buffers, context)
        tensors = {p: self.graph.tensors[u] for p, u in self.node.op.ports().items()}
        values = {p: buffers[p] for p in self.node.op.inputs()}
        for port, mask in self.node.op.unspecified(values, tensors).items():
            buffers[port][mask] = np.nan


class Scribbler(PlanBuilder):
    name: ClassVar[str] = "plugin.scribbler"
    engine_id: ClassVar[int] = 30700
    library: ClassVar[str] = "plugin"
    ops: ClassVar[tuple[str, ...]] = ("sdpa", "sdpa_backward")
    priority: ClassVar[int] = 10

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        inner = (ReferenceSdpa if node.op.kind == "sdpa" else ReferenceSdpaBackward)().build(node, graph, ctx)
        return Scribbling(inner, node, graph)


class IgnoresKeyLengths(Scribbler):
    """A sequence boundary ignored: the last sequence reads keys up to the padded length (in a ragged layout,
    the buffer past its sequences)."""

    name: ClassVar[str] = "plugin.ignores_lengths"
    engine_id: ClassVar[int] = 30701

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        inner = super().build(node, graph, ctx)

        class Wider(NodePlan):
            def execute(self, buffers: Any, context: Any = None) -> None:
                lkv = buffers["seq_len_kv"].copy()
                buffers["seq_len_kv"].reshape(-1)[-1] = S
                try:
                    inner.execute(buffers, context)
                finally:
                    buffers["seq_len_kv"][...] = lkv

        return Wider()


def device(builder: PlanBuilder) -> sigdnn.Executor:
    reg = Registry()
    reg.register(builder)
    return sigdnn.Executor("reference", registry=reg)


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("ragged_layout", [False, True])
def test_garbage_outside_sequences_passes_and_an_ignored_boundary_fails(ragged_layout: bool, backward: bool) -> None:
    g = graph(ragged_layout, backward)
    inputs = random_inputs(g, seed=4)
    lengths = inputs["lkv"].reshape(-1)
    assert np.all((lengths >= 1) & (lengths <= S)) and lengths[-1] < S
    good = validate(g, inputs, executor=device(Scribbler()))
    assert good.passed, good.table()
    bad = validate(g, inputs, executor=device(IgnoresKeyLengths()))
    assert not bad.passed


def test_random_offsets_pack_the_sequences_end_to_end() -> None:
    g = graph(True)
    inputs = random_inputs(g, seed=1)
    lq = inputs["lq"].reshape(-1)
    np.testing.assert_array_equal(inputs["q_off"].reshape(-1), np.concatenate([[0], np.cumsum(lq * H * D)]))
    assert inputs["q_off"].dtype == np.int32


def test_unspecified_masks_of_a_padded_output() -> None:
    lengths = np.array([0, 2, 9])
    mask = ragged.padding_rows((B, H, S, D), lengths)
    assert mask[0].all() and not mask[2].any() and mask[1, :, 2:].all() and not mask[1, :, :2].any()


def test_masks_are_found_past_a_node_whose_inputs_are_not_all_given() -> None:
    """unspecified_positions skips a node whose inputs are missing (a region's inner tensors were never
    captured) and goes on: the attention after it still gets its masks; an attention whose lengths are missing
    gets none (and reads nothing)."""
    from sigdnn.accuracy.unspecified import unspecified_positions

    g = sigdnn.Graph("varlen", io_dtype="float32", compute_dtype="float32")
    dims = (B, H, S, D)
    q0 = g.tensor("q0", dims, strides=bshd(dims))
    q = g.pointwise("identity", q0, name="inner")
    k, v = (g.tensor(n, dims, strides=bshd(dims)) for n in ("k", "v"))
    lq, lkv = g.tensor("lq", (B, 1, 1, 1), dtype="int32"), g.tensor("lkv", (B, 1, 1, 1), dtype="int32")
    o, _ = g.sdpa(q, k, v, 0.5, None, False, True, seq_len_q=lq, seq_len_kv=lkv, name="a")
    o.set_output(True).set_name("o")
    values = dict(random_inputs(g, 0))
    values["lq"] = np.array([3, 9, 1], np.int32).reshape(B, 1, 1, 1)
    values[q.name] = values.pop("q0")  # the identity's input missing, its output there
    masks = unspecified_positions(g, values)
    assert set(masks) == {"o", "a::stats"} and masks["o"].any() and not masks["o"].all()
    del values["lkv"]
    assert unspecified_positions(g, values) == {}


def small_bshd(g: sigdnn.Graph) -> tuple[Any, ...]:
    """q, k, v of 2 x 2 x 3 x 4 in BSHD (8 elements a token) and int32 query / key lengths, in ``g``."""
    dims = (2, 2, 3, 4)
    q, k, v = (g.tensor(n, dims, strides=bshd(dims)) for n in "qkv")
    lengths = {"seq_len_q": g.tensor("lq", (2,), dtype="int32"), "seq_len_kv": g.tensor("lkv", (2,), dtype="int32")}
    return q, k, v, lengths


@pytest.mark.parametrize("seed", range(12))
def test_one_offsets_tensor_placing_several_tensors_gets_room_for_each(seed: int) -> None:
    """o's and v's offsets are k's offsets tensor (k and v follow the key lengths, o the query lengths): the draw
    leaves each sequence the room the longest of them asks, so the outputs' sequences never overlap and the graph
    runs (it had raised "makes sequences of output 'o' overlap" where a query length passed a key length)."""
    g = sigdnn.Graph("shared_offsets", io_dtype="float32", compute_dtype="float32")
    q, k, v, lengths = small_bshd(g)
    q_off, k_off = (g.tensor(f"{p}_off", (3, 1, 1, 1), dtype="int32") for p in "qk")
    o, _ = g.sdpa(q, k, v, 0.5, None, False, True, **lengths, ragged_offsets={"q": q_off, "k": k_off, "v": k_off,
                                                                              "o": k_off})  # fmt: skip
    o.set_output(True)
    inputs = random_inputs(g, seed=seed)
    lq, lkv = inputs["lq"].astype(int), inputs["lkv"].astype(int)
    room = np.maximum(lq, lkv) * 8
    np.testing.assert_array_equal(inputs["k_off"].reshape(-1), np.concatenate([[0], np.cumsum(room)]))
    sigdnn.Executor().run(g, inputs)  # no ExecutionError: every sequence inside its buffer, none overlapping


@pytest.mark.parametrize("seed", range(12))
def test_nodes_sharing_offsets_and_lengths_draw_inputs_that_agree(seed: int) -> None:
    """A forward and a backward sharing lengths and offsets, the backward's v placed by q's offsets (query
    lengths in the forward, key lengths here): each node is handed what the earlier drew, keeps its lengths
    and keeps the room its offsets gave, so the graph runs whichever node draws first (the buffer fuzzer's case
    48,298 had raised "tensor 'q_off' makes sequences of output 'dv' overlap")."""
    for order in (0, 1):
        g = sigdnn.Graph("shared_nodes", io_dtype="float32", compute_dtype="float32")
        q, k, v, lengths = small_bshd(g)
        offs = {p: g.tensor(f"{p}_off", (3, 1, 1, 1), dtype="int32") for p in "qkvo"}
        o, stats = g.sdpa(q, k, v, 0.5, None, False, True, **lengths, ragged_offsets=offs)
        o.set_output(True)
        crossed = {**offs, "v": offs["q"]}
        for t in g.sdpa_backward(q, k, v, o, o, stats, 0.5, None, False, **lengths, ragged_offsets=crossed):
            t.set_output(True)
        if order:
            g.nodes.reverse()  # the backward draws first
        sigdnn.Executor().run(g, random_inputs(g, seed=seed))


@pytest.mark.parametrize("seed", range(12))
def test_one_lengths_tensor_for_both_ports_is_drawn_once(seed: int) -> None:
    """The forward's query and key lengths are one tensor, the backward's query lengths another, both nodes
    placing q and o by the same offsets: the shared tensor is one draw within both bounds, and the offsets leave
    room for it (the buffer fuzzer's case 5,745,028 drew it twice, placed q by the first draw and stored the
    second: "tensor 'o_off' makes sequences of output 'o' overlap")."""
    g = sigdnn.Graph("one_lengths", io_dtype="float32", compute_dtype="float32")
    q, k, v, lengths = small_bshd(g)
    offs = {p: g.tensor(f"{p}_off", (3, 1, 1, 1), dtype="int32") for p in "qkvo"}
    both = lengths["seq_len_kv"]
    o, stats = g.sdpa(q, k, v, 0.5, None, True, True, seq_len_q=both, seq_len_kv=both, ragged_offsets=offs)
    for t in g.sdpa_backward(q, k, v, o, o, stats, 0.5, None, True, **lengths, ragged_offsets=offs):
        t.set_output(True)
    inputs = random_inputs(g, seed=seed)
    lq, lkv = inputs["lq"].astype(int), inputs["lkv"].astype(int)
    assert lkv.min() >= 1 and lkv.max() <= 3
    room = np.maximum(lq, lkv) * 8  # q and o follow lkv in the forward, lq in the backward
    np.testing.assert_array_equal(inputs["q_off"].reshape(-1), np.concatenate([[0], np.cumsum(room)]))
    sigdnn.Executor().run(g, inputs)  # no ExecutionError
