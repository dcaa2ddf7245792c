"""cuTile gdn / kda forward and backward (the chunked kernels) on the CPU through the emulator, against the float64
recurrence and its exact reverse mode.

Through ``sigdnn.validate`` with its tolerances: lengths around the chunk
(1, 63, 64, 65), several sequences, empty ones, 1000s of tokens, every io
dtype, float32 and bfloat16 states, with and without the l2 norm. Planted
bugs in the kernel text (a chunk boundary off by one, a gate applied once
too often, a sequence boundary ignored) must fail validation.
"""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from delta_rule_cases import CHUNK_EDGES, campaign_recipe, delta_rule_backward_graph, delta_rule_graph
from delta_rule_checks import check, plant
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cutile import delta_rule, delta_rule_kernel, emulator
from sigdnn.plan_builders.cutile.delta_rule import (
    CutileGdnBuilder,
    CutileGdnBwdBuilder,
    CutileKdaBuilder,
    CutileKdaBwdBuilder,
)
from sigdnn.plan_builders.cutile.steps import WORKSPACE


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def passes_in_both_orders(graph, inputs, builder: str) -> bool:
    """Whether validation passes with the emulator's blocks run first to last and last to first: a block that
    writes another's elements (a race on a GPU) fails in one of the two orders."""
    if not check(graph, inputs, builder).passed:
        return False
    with emulator.reversed_blocks():
        return check(graph, inputs, builder).passed


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(
    ("io", "state", "l2norm", "lengths"),
    [
        ("bfloat16", "float32", True, CHUNK_EDGES),
        ("float16", None, True, (65, 0, 3)),
        ("float32", "bfloat16", False, (128, 1)),
        ("bfloat16", "bfloat16", True, (200,)),
    ],
)
def test_the_chunked_kernel_matches_the_recurrence(kind, io, state, l2norm, lengths) -> None:
    g, inputs = delta_rule_graph(kind, lengths, io=io, state=state, l2norm=l2norm, scale=None if l2norm else 0.5)
    report = check(g, inputs, f"cutile.{kind}")
    assert report.passed, report.table()


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(
    ("io", "state", "d_final", "l2norm", "lengths"),
    [
        ("bfloat16", "float32", True, True, CHUNK_EDGES),
        ("float32", None, False, False, (65, 0, 3)),
        ("float16", "bfloat16", True, True, (130, 1)),
        ("float32", "float32", False, True, (200,)),
    ],
)
def test_the_chunked_backward_matches_reverse_mode_through_the_recurrence(
    kind, io, state, d_final, l2norm, lengths
) -> None:
    g, inputs = delta_rule_backward_graph(kind, lengths, io=io, state=state, d_final=d_final, l2norm=l2norm)
    report = check(g, inputs, f"cutile.{kind}_bwd")
    assert report.passed, report.table()
    assert ("dh0" in {c.name for c in report.outputs}) == (state is not None)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(("kd", "vd"), [(9, 5), (1, 3), (3, 1)])
def test_head_dims_that_are_no_power_of_two(kind, kd, vd) -> None:
    """K and V padded to powers of two in the tiles (9 -> 16, 5 -> 8, 3 -> 4, 1 -> 1), forward and backward."""
    g, inputs = delta_rule_graph(kind, (*CHUNK_EDGES, 130), kd=kd, vd=vd)
    assert check(g, inputs, f"cutile.{kind}").passed
    g, inputs = delta_rule_backward_graph(kind, (*CHUNK_EDGES, 130), kd=kd, vd=vd)
    assert check(g, inputs, f"cutile.{kind}_bwd").passed
    shape = CutileGdnBuilder().shape(g.nodes[-1], g)[0]
    assert (shape.kp, shape.vp) == {9: (16, 8), 1: (1, 4), 3: (4, 1)}[kd]


MIXED_WITH_EMPTY = (0, 1, 64, 0, 130, 5, 0, 63, 65, 2, 129, 0, 7, 64, 1, 3, 0)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("counted", [delta_rule_kernel.COUNTED, 16], ids=["counted", "searched"])
def test_many_sequences_with_empty_ones_among_them(kind, counted, monkeypatch) -> None:
    """17 sequences, empty ones first, between and last, and chunk slots left empty between sequences: every chunk
    finds its own sequence, by counting the sequences' first slots at or before its own, and (past ``COUNTED``)
    by binary search (five steps a chunk slot)."""
    monkeypatch.setattr(delta_rule_kernel, "COUNTED", counted)
    g, inputs = delta_rule_graph(kind, MIXED_WITH_EMPTY, heads=3)
    builder = CutileKdaBuilder() if kind == "kda" else CutileGdnBuilder()
    chunks = builder.launches(g.nodes[-1], g)[0][0].source.text
    assert chunks.count("mid = (n + hi) // 2") == (5 if counted == 16 else 0)
    assert ("seqs = ct.arange(32, dtype=ct.int32)" in chunks) == (counted != 16)
    assert check(g, inputs, f"cutile.{kind}").passed


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_a_search_bug_fails_validation(kind, monkeypatch) -> None:
    """Past ``COUNTED`` sequences the binary search finds a slot's sequence: one found a step too late fails."""
    monkeypatch.setattr(delta_rule_kernel, "COUNTED", 16)
    plant(monkeypatch, "chunks_source", "n = ct.where(first <= slot, mid, n)", "n = ct.where(first < slot, mid, n)")
    g, inputs = delta_rule_graph(kind, MIXED_WITH_EMPTY, heads=3)
    assert not check(g, inputs, f"cutile.{kind}").passed


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("compute", [None, "bfloat16"], ids=["float32", "bf16 products"])
def test_campaign_cases_with_thousands_of_tokens(kind, compute) -> None:
    """A campaign recipe's case: sequences of 1, 63, 64, 65 and 1500 tokens, cu_seqlens a constant of the graph,
    at float32 and at bf16 products."""
    g = campaign_recipe(kind, (*CHUNK_EDGES, 1500), compute=compute).build()
    report = sigdnn.validate(g, random_inputs(g, seed=3), executor=emulated_executor(), truth="cpu")
    assert report.builders == {g.nodes[0].name: f"cutile.{kind}"}
    assert report.passed, report.table()


# Bugs in the gradients kernel's value blocks and their sum, which only a V of two blocks or more can show.
PLANTED_IN_VALUE_BLOCKS = {
    "the pair launch keeping the last value block's share only": (
        "pairs_source",
        "dkk = dkk + ct.gather(dkk_work",
        "dkk = ct.gather(dkk_work",
    ),
    "value blocks one column apart": (
        "gradients_source",
        "vcols = ct.bid(2) * VW + ct.arange(VW, dtype=ct.int32)",
        "vcols = ct.bid(2) * (VW - 1) + ct.arange(VW, dtype=ct.int32)",
    ),
    "every value block's share into the first block's rows": (
        "gradients_source",
        "block = (slot * H + head) * (VP // VW) + ct.bid(2)",
        "block = (slot * H + head) * (VP // VW)",
    ),
    "d(beta)'s sum over V left at the first block's share": (
        {"gdn": "pairs_source", "kda": "norms_source"},
        "dbeta = dbeta + ct.gather(dbeta_work",
        "dbeta = dbeta + 0.0 * ct.gather(dbeta_work",
    ),
}


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_the_gradients_run_a_block_per_64_value_columns(kind, monkeypatch) -> None:
    """V = 70 pads to 128: the gradients kernel runs two blocks of 64 value columns a chunk slot and head (the
    second holding 6), with at most [KP, 64] of the state and of d(state) live; the pair launch sums both blocks'
    shares of every sum over V, and dv's columns land where they belong. Each planted bug fails validation in one
    block order at least."""
    g, inputs = delta_rule_backward_graph(kind, (*CHUNK_EDGES, 130), kd=5, vd=70)
    builder = (CutileKdaBwdBuilder if kind == "kda" else CutileGdnBwdBuilder)()
    (grads,) = [launch for launch in builder.launches(g.nodes[-1], g)[0] if launch.source.prefix == "delta_rule_grads"]
    assert grads.grid[2] == 2 and "VW = 64" in grads.source.text and "VP = 128" in grads.source.text
    assert passes_in_both_orders(g, inputs, builder.name)
    for bug, (kernel, right, wrong) in PLANTED_IN_VALUE_BLOCKS.items():
        with monkeypatch.context() as patch:
            plant(patch, kernel if isinstance(kernel, str) else kernel[kind], right, wrong)
            g, inputs = delta_rule_backward_graph(kind, (*CHUNK_EDGES, 130), kd=5, vd=70)
            assert not passes_in_both_orders(g, inputs, builder.name), bug


PLANTED = {
    "chunk boundary off by one": (
        "last = ct.reshape(steps == C - 1, (C, 1))",
        "last = ct.reshape(steps == C - 2, (C, 1))",
    ),
    "gate applied once too often": ("b = ct.mma(", "b = gt + ct.mma("),
    "sequence boundary ignored": ("valid = rows < stop", "valid = rows < stop + 1"),
}


# (bug, kernel) pairs that change no result. Rows past a sequence's end are a chunk's last, and T is lower
# triangular, so the chunk kernel's rows before them do not see them; the walks and the gradients read their own
# masked k and beta, which zero every use of those rows' W, U0, QK and T. In the backward's forward walk such a
# row only exists in a sequence's last chunk, whose updated state nothing reads (the backward saves start states).
HARMLESS = {("sequence boundary ignored", "chunks_source"), ("sequence boundary ignored", "states_source")}


FORWARD_KERNELS = ("chunks_source", "forward_source")
BACKWARD_KERNELS = ("chunks_source", "states_source", "reverse_source", "gradients_source", "pairs_source")
KDA_BACKWARD_KERNELS = (*BACKWARD_KERNELS, "norms_source")


# At bf16 products gdn's walks read ready-made operands, zero past a sequence's end: its reverse walk's extra row
# adds nothing. A bug too small for bf16 products' bound, caught at float32: kda's reverse walk decaying d(state)
# from the chunk's second-to-last row moves the gradients by 1.4e-3 of their largest.
UNSEEN_AT_BF16 = {("gdn", "sequence boundary ignored", "reverse_source"), ("kda", "chunk boundary off by one", "reverse_source")}  # fmt: skip


@pytest.mark.parametrize("bug", list(PLANTED))
@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("compute", ["float32", "bfloat16"])
def test_planted_bugs_fail_validation(kind, bug, backward, compute, monkeypatch) -> None:
    """Each bug planted in one kernel at a time, in every kernel of the node whose text has the line; validation
    fails in one block order at least (a bug that makes a block write another's elements shows in one order), at
    float32 and at bf16 products (whose bound grows with the sequence at float32's epsilon, not bf16's), with
    gates strong enough that a decay applied once too often shows at bf16's (g up to -0.2 a token; up to -0.5,
    a chunk's decay hides the bugs that reach past it at float32's)."""
    right, wrong = PLANTED[bug]
    shape = delta_rule_kernel.DeltaRuleShape(2, 8, 8, kind == "kda", True, 0.5, True, True, products=compute)
    names = (KDA_BACKWARD_KERNELS if kind == "kda" else BACKWARD_KERNELS) if backward else FORWARD_KERNELS
    names += ("ready_source",) * shape.ready_operands
    text = {k: getattr(delta_rule_kernel, k)(shape, **({"backward": backward} if k == "chunks_source" else {}))
            for k in names}  # fmt: skip
    unseen = UNSEEN_AT_BF16 if compute == "bfloat16" else set()
    kernels = [
        k for k, t in text.items() if right in t.text and (bug, k) not in HARMLESS and (kind, bug, k) not in unseen
    ]
    assert kernels
    for kernel in kernels:
        with monkeypatch.context() as patch:
            plant(patch, kernel, right, wrong)
            if backward:
                g, inputs = delta_rule_backward_graph(kind, (*CHUNK_EDGES, 130))
            else:
                g, inputs = delta_rule_graph(kind, (*CHUNK_EDGES, 130))
            g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
            inputs["g"] = -np.random.default_rng(3).uniform(0, 0.2, inputs["g"].shape).astype(np.float32)
            assert not passes_in_both_orders(g, inputs, f"cutile.{kind}" + "_bwd" * backward), f"{bug} in {kernel}"


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_the_gradients_kernels_scan_of_the_gate_is_checked(kind, monkeypatch) -> None:
    """The gradients kernel forms b by cuTile's scan, the others by the row sums' MMAs (the scan spilled more
    there, docs/experiments.md); a gate applied once too often in the scan fails validation too."""
    g, inputs = delta_rule_backward_graph(kind, (*CHUNK_EDGES, 130))
    builder = CutileKdaBwdBuilder() if kind == "kda" else CutileGdnBwdBuilder()
    scans = [
        launch.source.prefix for launch in builder.launches(g.nodes[-1], g)[0] if "ct.cumsum(" in launch.source.text
    ]
    assert scans == ["delta_rule_grads"]
    plant(monkeypatch, "gradients_source", "b = ct.cumsum(gt, axis=0)", "b = gt + ct.cumsum(gt, axis=0)")
    assert not check(g, inputs, f"cutile.{kind}_bwd").passed


PLANTED_IN_CHUNKS = {
    "gate applied once too often": PLANTED["gate applied once too often"],
    "a slot's sequence found one too late": ("listed & (firsts <= slot)", "listed & (firsts < slot)"),
    "a chunk's W without its decay": ("bt * (kt * ct.exp(b))", "bt * kt"),
    "a chunk's rows off by one": ("rows = start + chunk * C + steps", "rows = start + chunk * C + steps + 1"),
    "QK stored transposed": (
        "ct.scatter(qk_work, at * C + ccols2, ct.astype(qk, qk_work.dtype))",
        "ct.scatter(qk_work, at * C + ccols2, ct.astype(ct.transpose(qk), qk_work.dtype))",
    ),
    "T stored transposed": (
        "ct.scatter(t_work, at * C + ccols2, ct.astype(inverse, t_work.dtype))",
        "ct.scatter(t_work, at * C + ccols2, ct.astype(ct.transpose(inverse), t_work.dtype))",
    ),
    "KK stored transposed": (
        "ct.scatter(kk_work, at * C + ccols2, kk)",
        "ct.scatter(kk_work, at * C + ccols2, ct.transpose(kk))",
    ),
}


@pytest.mark.parametrize("bug", list(PLANTED_IN_CHUNKS))
@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_bugs_planted_in_the_chunk_kernel_fail_validation(kind, bug, monkeypatch) -> None:
    """The first launch (every chunk's QK and T, the backward's W, U0 and KK too) alone, in the forward and the
    backward where its text has the line, sequences of 1 to 130 tokens."""
    right, wrong = PLANTED_IN_CHUNKS[bug]
    plant(monkeypatch, "chunks_source", right, wrong)
    shape = delta_rule_kernel.DeltaRuleShape(2, 8, 8, kind == "kda", True, 0.5, True, True)
    runs = [(keep, make) for keep, make in ((False, delta_rule_graph), (True, delta_rule_backward_graph))
            if right in delta_rule_kernel.chunks_source(shape, backward=keep).text]  # fmt: skip
    assert runs
    for backward, make in runs:
        g, inputs = make(kind, (*CHUNK_EDGES, 130))
        assert not check(g, inputs, f"cutile.{kind}" + "_bwd" * backward).passed, bug


PLANTED_IN_THE_WALK = {
    "T read transposed": (
        "u = dot(ct.gather(t_work, at * C + ccols2),",
        "u = dot(ct.transpose(ct.gather(t_work, at * C + ccols2)),",
    ),
    "the next slot's T read": ("ct.gather(t_work, at * C + ccols2)", "ct.gather(t_work, (at + H * C) * C + ccols2)"),
    "QK read for T": ("ct.gather(t_work, at * C + ccols2)", "ct.gather(qk_work, at * C + ccols2)"),
    "U without beta": ("bt * e, zero_cv)", "e, zero_cv)"),
    "the keys' decay from the chunk's start left out of U": ("dot(kt * eb, state", "dot(kt, state"),
}


@pytest.mark.parametrize("bug", list(PLANTED_IN_THE_WALK))
@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_bugs_planted_in_the_walks_use_of_t_fail_validation(kind, bug, monkeypatch) -> None:
    """The forward's walk forms U = T diag(beta) (V - (e^b K) h) from the chunk kernel's T: each bug in that
    hand-over fails validation in one block order at least, sequences of 1 to 130 tokens."""
    plant(monkeypatch, "forward_source", *PLANTED_IN_THE_WALK[bug])
    g, inputs = delta_rule_graph(kind, (*CHUNK_EDGES, 130))
    assert not passes_in_both_orders(g, inputs, f"cutile.{kind}"), bug


def test_declines_name_the_port() -> None:
    g, _ = delta_rule_graph("gdn", (5,), kd=300)
    with pytest.raises(NotSupported, match="head dims K 300, V 8: at most 256"):
        CutileGdnBuilder().check(g.nodes[0], g)
    g, _ = delta_rule_graph("kda", (5,))
    g.tensors[g.nodes[0].op.g].set_data_type("bfloat16")
    with pytest.raises(NotSupported, match=r"port 'g' \(tensor 'g'\) is bfloat16"):
        CutileKdaBuilder().check(g.nodes[0], g)
    g, _ = delta_rule_graph("kda", (5,))
    g.tensors[g.nodes[0].op.q].set_stride((1, 5, 10))
    with pytest.raises(NotSupported, match=r"port 'q' \(tensor 'q'\) is not packed row-major"):
        CutileKdaBuilder().check(g.nodes[0], g)


@pytest.mark.parametrize("values", [[0, 3, 2**30], [-(2**30), 1, 5], [0, 5, 2]])
def test_hostile_boundaries_cost_at_most_the_tokens_and_stay_inside(values) -> None:
    """The kernel does not check cu_seqlens (the reference does): it clamps them to [0, T], so it neither walks
    2^30 tokens (2^24 chunks: minutes in the emulator) nor touches memory past the tensors."""
    g, inputs = delta_rule_graph("gdn", (3, 2))
    inputs["cu"] = np.array(values, np.int32)
    ex = emulated_executor()
    plan = ex.prepare(g)
    assert plan.steps[0].builder.name == "cutile.gdn"
    started = time.perf_counter()
    out = ex.execute(plan, inputs)
    assert time.perf_counter() - started < 10
    assert out["o"].shape == (5, 2, 8)


def test_one_kernel_serves_every_token_count() -> None:
    """T is read from q's (k's) length on the device: batches of other lengths and as many sequences to a power of
    two reuse the compiled texts; the chunk kernel counts over twice as many starts for each doubling of N."""
    shape = delta_rule_kernel.DeltaRuleShape(2, 8, 8, False, True, 0.5, True, True)
    assert "tokens = q.shape[0] // (H * K)" in delta_rule_kernel.forward_source(shape).text
    assert "tokens = k.shape[0] // (H * K)" in delta_rule_kernel.chunks_source(shape, backward=False).text
    graphs = [delta_rule_graph("gdn", lengths)[0] for lengths in ((3, 2), (300, 7), (300, 7, 1, 4, 5), (9,))]
    sources = [[launch.source for launch in CutileGdnBuilder().launches(g.nodes[0], g)[0]] for g in graphs]
    assert sources[0] == sources[1]
    assert sources[0][1] == sources[2][1] and sources[0][0] != sources[2][0]
    counted = [
        re.search(r"seqs = ct.arange\((\d+),", s.text).group(1) for s in (sources[0][0], sources[2][0], sources[3][0])
    ]
    assert counted == ["4", "8", "2"]  # 2, 5 and 1 sequences


@pytest.mark.parametrize(
    ("port", "dtype", "allowed"),
    [
        ("cu_seqlens", "int32", True), ("cu_seqlens", "int64", True), ("cu_seqlens", "float32", False),
        ("g", "float32", True), ("g", "bfloat16", False), ("dg", "float32", True), ("dg", "float16", False),
        ("initial_state", "bfloat16", True), ("d_final_state", "float32", True), ("final_state", "float16", False),
        ("d_initial_state", "float16", False), ("q", "float16", True), ("v", "float64", False),
    ],
)  # fmt: skip
def test_the_dtypes_each_port_takes(port, dtype, allowed) -> None:
    assert delta_rule.dtype_allowed(port, sigdnn.dtypes.as_data_type(dtype)) is allowed


def backward_launches(kind: str) -> tuple[list, int, int, int]:
    """The backward's launches and workspace bytes for sequences of 64, 65 and 1 tokens, two heads, K = 8, V = 128;
    its chunk slots (T // 64 + N + 1) and workspace rows (C a slot and head)."""
    g, _ = delta_rule_backward_graph(kind, (64, 65, 1), heads=2, kd=8, vd=128)
    builder = CutileKdaBwdBuilder() if kind == "kda" else CutileGdnBwdBuilder()
    launches, workspace = builder.launches(g.nodes[0], g)
    slots = 130 // 64 + 3 + 1
    return launches, workspace, slots, slots * 2 * 64


# the gradients kernel's shares, elements a (chunk slot, head, value block): dQK, dKK, dbeta; then gdn's dq~, dk~,
# db, kda's three [C, K] products and its state . d(state) row (K = 8)
SHARES = {"gdn": [64 * 64, 64 * 64, 64, 64 * 8, 64 * 8, 64], "kda": [64 * 64, 64 * 64, 64, *(64 * 8,) * 3, 8]}


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_the_backward_walks_then_hands_every_value_blocks_share_over(kind) -> None:
    """Chunk slots floor(start / 64) + n for every chunk of every sequence, per head. The chunk kernel a block per
    slot and head, the sequences ranked longest first, the two walks a block per sequence, head and 64 value
    columns (on one axis), the gradients a block per slot, head and 64 value columns. In the workspace: W, U0, QK,
    T and KK (C rows a slot and head), the saved states and d(state)s (K x V a slot and head), the ranking's order,
    then the gradients' shares (C rows a slot, head and value block), each launch reading what the ones before
    wrote."""
    (chunks, ranking, states, reverse, grads, *_), _, slots, rows = backward_launches(kind)
    assert chunks.grid == (slots, 2, 1) and grads.grid == (slots, 2, 2) and states.grid == reverse.grid == (12, 1, 1)
    w, u, qk, t, kk = chunks.args[-5:]
    assert [a.shape for a in (w, u, qk, t, kk)] == [(rows * 8,), (rows * 128,)] + [(rows * 64,)] * 3
    saved, dsaved = states.args[-1], reverse.args[-1]
    assert saved.shape == dsaved.shape == (slots * 2 * 8 * 128,) and saved.offset != dsaved.offset
    order = ranking.args[1]
    assert ranking.grid == (1, 1, 1) and ranking.args[0].buffer == "cu_seqlens"
    assert (order.buffer, order.shape, order.dtype) == (WORKSPACE, (3,), "int32")
    assert states.args[3] == reverse.args[5] == order
    assert states.args[-3:-1] == (w, u)
    assert reverse.args[8:10] == (qk, t)
    assert reverse.args[10].buffer == "d_initial_state"
    assert grads.args[6:11] == (saved, dsaved, qk, t, kk)
    handed = grads.args[11:-1]
    assert [a.shape for a in handed] == [(slots * 2 * 2 * size,) for size in SHARES[kind]]
    assert len({a.offset for a in handed}) == len(handed) and all(a.buffer == WORKSPACE for a in handed)
    assert [a.buffer for a in grads.args[:6]] == ["k", "v", "g", "beta", "cu_seqlens", "d_o"]
    assert grads.args[-1].buffer == "dv"


def test_gdns_pair_launch_sums_the_shares_and_stores_the_rest() -> None:
    """gdn's fifth and last launch, a block per slot and head, reads QK and KK and every share, and stores dq, dk,
    dg and dbeta."""
    (chunks, *_, grads, pairs), workspace, slots, rows = backward_launches("gdn")
    qk, kk = chunks.args[-3], chunks.args[-1]
    assert pairs.grid == (slots, 2, 1)
    assert pairs.args[4:-4] == (qk, kk, *grads.args[11:-1])
    assert [a.buffer for a in pairs.args[:4]] == ["q", "k", "g", "cu_seqlens"]
    assert [a.buffer for a in pairs.args[-4:]] == ["dq", "dk", "dg", "dbeta"]
    before = (rows * (8 + 128 + 64 * 3) + 2 * slots * 2 * 8 * 128) * 4 + 256  # and the order, 256-byte aligned
    assert workspace == before + slots * 2 * 2 * sum(SHARES["gdn"]) * 4


def test_kdas_pair_launch_runs_a_block_per_key_block_and_hands_dq_dk_to_a_sixth() -> None:
    """kda's pair launch, a block per slot, head and 64 key columns (one at K = 8), sums every share but dbeta's
    and stores dg; its dq~ and dk~ (C rows of K a slot and head) go to the last launch, a block per slot and head,
    which stores dq, dk and dbeta."""
    (*_, grads, pairs, norms), workspace, slots, rows = backward_launches("kda")
    handed = grads.args[11:-1]
    assert pairs.grid == (slots, 2, 1) and norms.grid == (slots, 2, 1)
    paired = pairs.args[-3:-1]
    assert [a.shape for a in paired] == [(rows * 8,)] * 2 and all(a.buffer == WORKSPACE for a in paired)
    assert pairs.args[4:-3] == (*handed[:2], *handed[3:])
    assert [a.buffer for a in pairs.args[:4]] == ["q", "k", "g", "cu_seqlens"] and pairs.args[-1].buffer == "dg"
    assert norms.args[3:6] == (*paired, handed[2])
    assert "KP = 8" in pairs.source.text and "whole" not in pairs.source.text  # one key block: no row read again
    assert [a.buffer for a in norms.args] == ["q", "k", "cu_seqlens", *[WORKSPACE] * 3, "dq", "dk", "dbeta"]
    before = (rows * (8 + 128 + 64 * 3) + 2 * slots * 2 * 8 * 128) * 4 + 256  # and the order, 256-byte aligned
    assert workspace == before + slots * 2 * 2 * sum(SHARES["kda"]) * 4 + 2 * rows * 8 * 4


# Bugs in kda's key blocks (K = 70 pads to 128: two blocks, the second holding 6 columns) and their hand-over.
PLANTED_IN_KEY_BLOCKS = {
    "key blocks one column apart (column 64 left out)": (
        "pairs_source",
        "kcols = ct.bid(2) * KP + ct.arange(KP, dtype=ct.int32)",
        "kcols = ct.bid(2) * (KP + 1) + ct.arange(KP, dtype=ct.int32)",
    ),
    "the queries' l2 norm over the block's columns only": (
        "pairs_source",
        "rq = ct.rsqrt(ct.sum(whole * whole",
        "rq = ct.rsqrt(ct.sum(qr * qr",
    ),
    "dq~ handed over in the next slot's rows": (
        "pairs_source",
        "ct.scatter(pair_dq_work, at * KROW + kcols2, dqt)",
        "ct.scatter(pair_dq_work, (at + C * H) * KROW + kcols2, dqt)",
    ),
    "the last launch reading dk~ for dq~": (
        "norms_source",
        "dqt = ct.gather(pair_dq_work",
        "dqt = ct.gather(pair_dk_work",
    ),
}


def test_kdas_pair_launch_splits_the_key_columns(monkeypatch) -> None:
    """K = 70 pads to 128: kda's pair launch runs two blocks of 64 key columns a slot and head, each normalizing
    over the whole row; the last launch sums the l2 norm's reverse over all of K. Each planted bug fails
    validation in one block order at least."""
    g, inputs = delta_rule_backward_graph("kda", (*CHUNK_EDGES, 130), kd=70, vd=8)
    (*_, pairs, _), _ = CutileKdaBwdBuilder().launches(g.nodes[-1], g)
    assert pairs.grid[2] == 2 and "KP = 64" in pairs.source.text and "KROW = 128" in pairs.source.text
    assert passes_in_both_orders(g, inputs, "cutile.kda_bwd")
    for bug, (kernel, right, wrong) in PLANTED_IN_KEY_BLOCKS.items():
        with monkeypatch.context() as patch:
            plant(patch, kernel, right, wrong)
            g, inputs = delta_rule_backward_graph("kda", (*CHUNK_EDGES, 130), kd=70, vd=8)
            assert not passes_in_both_orders(g, inputs, "cutile.kda_bwd"), bug


# Bugs in the hand-over from the gradients kernel to the pair launch, by kernel: its rows must be the chunk slot's
# and head's in both, and each array read as it was written.
PLANTED_IN_THE_HAND_OVER = {
    "the hand-over's rows by chunk, not chunk slot": (
        ("gradients_source", "pairs_source"),
        "block = (slot * H + head) * (VP // VW)",
        "block = (chunk * H + head) * (VP // VW)",
    ),
    "the pair launch reading the next slot's rows": (
        ("pairs_source",),
        "block = (slot * H + head) * (VP // VW)",
        "block = ((slot + 1) * H + head) * (VP // VW)",
    ),
    "the pair launch reading another head's rows": (
        ("pairs_source",),
        "block = (slot * H + head) * (VP // VW)",
        "block = (slot * H + (head + 1) % H) * (VP // VW)",
    ),
    "KK's gradient handed over transposed": (
        ("gradients_source",),
        "ct.scatter(dkk_work, part * C + ccols2, dkk)",
        "ct.scatter(dkk_work, part * C + ccols2, ct.transpose(dkk))",
    ),
    "QK's gradient handed over transposed": (
        ("gradients_source",),
        "ct.scatter(dqk_work, part * C + ccols2, dqk)",
        "ct.scatter(dqk_work, part * C + ccols2, ct.transpose(dqk))",
    ),
    "the gradients kernel reading T transposed": (
        ("gradients_source",),
        "inverse = ct.gather(t_work, at * C + ccols2)",
        "inverse = ct.transpose(ct.gather(t_work, at * C + ccols2))",
    ),
    "the gradients kernel reading another head's KK": (
        ("gradients_source",),
        "kk = ct.gather(kk_work, at * C + ccols2)",
        "kk = ct.gather(kk_work, (at + C) * C + ccols2)",
    ),
}


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("bug", list(PLANTED_IN_THE_HAND_OVER))
def test_bugs_planted_in_the_hand_over_fail_validation(kind, bug, monkeypatch) -> None:
    """Sequences of 1 to 130 tokens (chunk slots of several sequences, a gap between them), two heads; validation
    fails in one block order at least (rows shared by two blocks are a race on a GPU)."""
    kernels, right, wrong = PLANTED_IN_THE_HAND_OVER[bug]
    for kernel in kernels:
        plant(monkeypatch, kernel, right, wrong)
    g, inputs = delta_rule_backward_graph(kind, (*CHUNK_EDGES, 130))
    assert not passes_in_both_orders(g, inputs, f"cutile.{kind}_bwd"), bug


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_the_compute_dtype_sets_the_chunk_products_operands(kind, backward) -> None:
    """At a float16 compute dtype the products go as one MMA of TF32 operands, at bfloat16 of bfloat16 ones, at
    float32 as three of the operands' high and low TF32 parts, the gate's cumulative sums exact: the kernel text
    says so, the outputs move off the float32 run's (and bfloat16's off TF32's), and validation against the
    recurrence passes at each compute dtype's tolerance."""
    make = delta_rule_backward_graph if backward else delta_rule_graph
    builder = {"gdn": CutileGdnBwdBuilder if backward else CutileGdnBuilder,
               "kda": CutileKdaBwdBuilder if backward else CutileKdaBuilder}[kind]()  # fmt: skip
    outputs = {}
    for compute in ("float32", "float16", "bfloat16"):
        g, inputs = make(kind, CHUNK_EDGES, kd=16, vd=16)
        g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
        operands = {"float32": None, "float16": "tfloat32", "bfloat16": "bfloat16"}[compute]
        launches = builder.launches(g.nodes[-1], g)[0]
        assert [launch.source.prefix for launch in launches if "def dot(" not in launch.source.text] == [
            "delta_rule_order"
        ]  # the ranking alone has no products
        for launch in (launch for launch in launches if "def dot(" in launch.source.text):
            split = "al = ct.astype(a - ct.astype(ah, ct.float32), ct.tfloat32)" in launch.source.text
            assert split == (compute == "float32")
            one = f"    return ct.mma(ct.astype(a, ct.{operands}), ct.astype(b, ct.{operands}), acc)"
            assert (one in launch.source.text.splitlines()) == (operands is not None)
            text = launch.source.text.splitlines()
            others = ("ones_below", "exact_ones", "select")  # the gate's row sums; kda's one-hot row selection
            direct = [line for line in text if "ct.mma(" in line and not any(o in line for o in others)]
            assert len(direct) == 1  # dot()'s own: every other product goes through it
        outputs[compute] = emulated_executor().run(g, inputs)
        g, inputs = make(kind, CHUNK_EDGES, kd=16, vd=16)
        g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
        report = check(g, inputs, builder.name)
        assert report.passed, report.table()
    for compute, other in (("float16", "float32"), ("bfloat16", "float32"), ("bfloat16", "float16")):
        assert any(not np.array_equal(outputs[other][n], outputs[compute][n]) for n in outputs[other])


@pytest.mark.parametrize(("compute", "vd", "blocks"), [("bfloat16", 128, 1), ("bfloat16", 256, 4), ("float16", 128, 2)])
def test_the_forward_walk_carries_all_of_v_up_to_128_with_bfloat16_products(compute, vd, blocks) -> None:
    """One forward walk block a (sequence, head) with bfloat16 products and V <= 128, blocks of 64 value columns
    otherwise; at V = 128 one block's walk validates against the recurrence."""
    g, inputs = delta_rule_graph("gdn", (70, 3), heads=1, kd=16, vd=vd)
    g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
    walk = CutileGdnBuilder().launches(g.nodes[-1], g)[0][-1]
    assert walk.grid == (2 * blocks, 1, 1)
    assert f"\nVW = {vd // blocks}\n" in walk.source.text
    if blocks == 1:
        assert check(g, inputs, "cutile.gdn").passed


@pytest.mark.parametrize(("kd", "vd", "planned"), [(256, 256, True), (257, 8, False), (8, 257, False)])
def test_head_dims_up_to_256_are_planned(kd, vd, planned) -> None:
    g, _ = delta_rule_graph("gdn", (3,), heads=1, kd=kd, vd=vd)
    if planned:
        assert CutileGdnBuilder().launches(g.nodes[-1], g)[0][-1].grid == (4, 1, 1)
    else:
        with pytest.raises(NotSupported, match="head dims"):
            CutileGdnBuilder().check(g.nodes[-1], g)


@pytest.mark.parametrize("port", ["initial_state", "d_final_state"])
def test_a_float16_state_is_not_served(port) -> None:
    """States are float32 or bf16 (the kernel's state gathers and scatters); float16, an io dtype, is not one."""
    g, _ = delta_rule_backward_graph("gdn", (5,), state="float16" if port == "initial_state" else "float32")
    node = g.nodes[-1]
    if port == "d_final_state":
        g.tensors[node.op.ports()[port]].set_data_type("float16")
    builder = CutileGdnBwdBuilder()
    assert not builder.serves(sigdnn.key_for(node, g))
    with pytest.raises(NotSupported, match=f"port '{port}'.* is float16"):
        builder.check(node, g)
    g, _ = delta_rule_backward_graph("gdn", (5,))
    assert builder.serves(sigdnn.key_for(g.nodes[-1], g))
    assert not CutileGdnBuilder().serves(sigdnn.key_for(g.nodes[-1], g))  # another op's node


def test_the_forward_is_three_launches_over_flat_packed_views_and_a_workspace() -> None:
    """Every chunk's QK and T (a block per chunk slot and head), the sequences ranked longest first, then the
    serial walk (a block per sequence, head and 64 value columns, on one axis); ports as flat views of their whole
    buffers (stride 1), an absent initial state a one-element stand-in; QK and T in the workspace, C rows per slot
    and head, C columns each, then the int32 order."""
    g, _ = delta_rule_graph("gdn", (5, 70), heads=2, kd=8, vd=128, state=None)
    (chunks, ranking, walk), workspace = CutileGdnBuilder().launches(g.nodes[-1], g)
    slots = 75 // 64 + 2 + 1
    assert chunks.grid == (slots, 2, 1) and ranking.grid == (1, 1, 1) and walk.grid == (8, 1, 1)
    rows = slots * 2 * 64
    work = chunks.args[-2:]
    assert [a.shape for a in work] == [(rows * 64,), (rows * 64,)]
    assert walk.args[8:10] == work
    order = ranking.args[1]
    assert walk.args[6] == order and (order.shape, order.dtype, order.offset * 4) == ((2,), "int32", rows * 128 * 4)
    assert ranking.args[0].buffer == "cu_seqlens"
    assert workspace == rows * (64 + 64) * 4 + 256
    views = {
        a.buffer: (a.shape, a.strides) for a in (*chunks.args[:-2], *walk.args[:6], *walk.args[7:8], *walk.args[10:])
    }
    assert views["q"] == ((75 * 2 * 8,), (1,)) and views["v"] == ((75 * 2 * 128,), (1,))
    assert all(strides == (1,) for _, strides in views.values())
    assert [a.buffer for a in chunks.args] == ["q", "k", "g", "beta", "cu_seqlens", *[WORKSPACE] * 2]
    assert [a.buffer for a in walk.args] == [
        "q", "k", "v", "g", "beta", "cu_seqlens", WORKSPACE, "o", *[WORKSPACE] * 2, "o", "final_state",
    ]  # fmt: skip
    assert walk.args[7].shape == (1,)  # o standing in for h0


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("products", ["tfloat32", "bfloat16", "float32"])
def test_the_kernels_run_8_worker_warps_where_they_spill_less(kind, products) -> None:
    """Both chunk kernels and the state walk ask cuTile for 8 worker warps (its default 4 held the [64, 128] float32
    tiles in half the block's threads and spilled, docs/experiments.md), gdn's forward chunk kernel with bfloat16
    products for two blocks an SM as well; so do the forward walk, the reverse walk and the pair launch, but for gdn
    at a float32 compute dtype; the gradients kernel and kda's norms keep cuTile's own choice."""
    shape = delta_rule_kernel.DeltaRuleShape(2, 128, 128, kind == "kda", True, 0.5, True, True, products=products)
    eight, default = "\n@ct.kernel(num_worker_warps=8)\ndef kernel(", "\n@ct.kernel\ndef kernel("
    walks = eight if products != "float32" or kind == "kda" else default
    two = "\n@ct.kernel(occupancy=2, num_worker_warps=8)\ndef kernel("
    expected = {
        delta_rule_kernel.chunks_source(shape, backward=False): two
        if (kind, products) == ("gdn", "bfloat16")
        else eight,
        delta_rule_kernel.chunks_source(shape, backward=True): eight,
        delta_rule_kernel.states_source(shape): eight,
        delta_rule_kernel.forward_source(shape): walks,
        delta_rule_kernel.reverse_source(shape): walks,
        delta_rule_kernel.pairs_source(shape): walks,
        delta_rule_kernel.gradients_source(shape): default,
        delta_rule_kernel.norms_source(shape): default,
    }
    for source, hint in expected.items():
        assert hint in source.text, source.prefix


@pytest.mark.parametrize(("kind", "vd", "blocks"), [("gdn", 128, 2), ("gdn", 256, 4), ("gdn", 64, 1), ("gdn", 8, 1),
                                                   ("kda", 128, 2)])  # fmt: skip
def test_the_serial_walk_splits_the_value_columns(kind, vd, blocks) -> None:
    g, inputs = delta_rule_graph(kind, (3, 70), heads=1, kd=8, vd=vd)
    builder = CutileGdnBuilder() if kind == "gdn" else CutileKdaBuilder()
    (_, _, walk), _ = builder.launches(g.nodes[-1], g)
    assert walk.grid == (2 * blocks, 1, 1)
    if vd == 128:
        assert check(g, inputs, builder.name).passed


@pytest.mark.parametrize(
    ("tokens", "vd", "heads", "declined"),
    [(2**24 - 128, 32, 1, False), (2**24 - 64, 32, 1, True), (2**23 - 128, 128, 1, False), (2**23 - 64, 128, 1, True),
     (2**22 - 128, 128, 2, False), (2**22 - 64, 128, 2, True)],
)  # fmt: skip
def test_arrays_past_int32_positions_are_declined(tokens, vd, heads, declined) -> None:
    """One head, one sequence, K = 128: T // 64 + 2 chunk slots of 64 rows. With V = 32 the forward's W binds: at
    T = 2^24 - 128 it holds 2^24 rows x 128 = 2^31 elements, the last position int32 reaches (the backward's 2^18
    state slots of 128 x 32 half that): planned; 64 tokens more (a slot more), declined. With V = 128 the
    backward's slots bind: 2^17 of them (T = 2^23 - 128) hold 2^31 elements, one more is declined; with two heads,
    2^16 slots a head."""
    g = sigdnn.Graph("long", io_dtype="bfloat16", compute_dtype="float32")
    q, k = g.tensor("q", (tokens, heads, 128)), g.tensor("k", (tokens, heads, 128))
    v, d_o = g.tensor("v", (tokens, heads, vd)), g.tensor("d_o", (tokens, heads, vd))
    gate, beta = g.tensor("g", (tokens, heads), dtype="float32"), g.tensor("beta", (tokens, heads))
    cu = g.tensor("cu", (2,), dtype="int32")
    g.gdn(q, k, v, gate, beta, cu, None, use_qk_l2norm=True, name="n")
    g.gdn_bwd(q, k, v, gate, beta, cu, None, d_o, None, use_qk_l2norm=True, name="b")
    for node, builder in zip(g.nodes, (CutileGdnBuilder(), CutileGdnBwdBuilder())):
        if declined:
            with pytest.raises(NotSupported, match="int32 positions"):
                builder.check(node, g)
        else:
            builder.check(node, g)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_no_block_writes_another_blocks_elements(kind, backward) -> None:
    """The blocks of every launch run last to first give results that pass as well: no two blocks write one
    element (on a GPU, a race)."""
    g, inputs = (delta_rule_backward_graph if backward else delta_rule_graph)(kind, (*CHUNK_EDGES, 130))
    assert passes_in_both_orders(g, inputs, f"cutile.{kind}" + "_bwd" * backward)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_without_a_final_state_output(kind) -> None:
    g, inputs = delta_rule_graph(kind, (*CHUNK_EDGES, 130), final=False)
    assert [t.name for t in g.outputs] == ["o"]
    assert check(g, inputs, f"cutile.{kind}").passed


def strong_decays(inputs: dict[str, np.ndarray], seed: int) -> dict[str, np.ndarray]:
    """``inputs`` with gates of -U(0, 12) a token (a chunk's decay to e^-768), in half the channels only for kda:
    a pair's decay underflows within a sub-chunk while its neighbour channel keeps it near 1."""
    g = -np.random.default_rng(seed).uniform(0, 12, inputs["g"].shape)
    if g.ndim == 3:
        g[..., ::2] *= 1e-3
    return {**inputs, "g": g.astype(np.float32)}


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_strong_decays_neither_overflow_nor_lose_the_pairs(kind, backward) -> None:
    """Decays past float32's range inside one chunk: every exponent the kernels form stays <= 0 (kda's pairs
    across sub-chunks factor through a reference token, exp(b_i - b_r) exp(b_r - b_j)), so nothing overflows and
    the channels that barely decay keep their pairs."""
    make = delta_rule_backward_graph if backward else delta_rule_graph
    g, inputs = make(kind, (*CHUNK_EDGES, 130))
    report = check(g, strong_decays(inputs, 5), f"cutile.{kind}" + "_bwd" * backward)
    assert report.passed, report.table()


# Bugs in kda's pair gradients by levels (the backward's pair launch): each must fail validation on strong gates.
PLANTED_IN_LEVEL_GRADIENTS = {
    "QK's diagonal gradient left out": ("dqt = dqt + dqk_diagonal * kt", "dqt = dqt + 0.0 * dqk_diagonal * kt"),
    "dKK not transposed for the earlier rows": ("dkb = dot(ct.transpose(a), ka,", "dkb = dot(a, ka,"),
    "the earlier rows' key gradient dropped": ("dkt = dkt + dka * later + dkb * sooner", "dkt = dkt + dka * later"),
    "b's earlier-row term of the wrong sign": ("* later - dkb * kb", "* later + dkb * kb"),
    "the level's block mask left out": ("a = ct.where(same_block, dkk, 0.0)", "a = dkk"),
    "b's later-row key term dropped": ("(dka * kt + dqa * qt) * later", "(dqa * qt) * later"),
    "b's later-row query term dropped": ("(dka * kt + dqa * qt) * later", "(dka * kt) * later"),
    "the queries' gradient without its decay": ("dqt = dqt + dqa * later", "dqt = dqt + dqa"),
    "the reference row not selected (b_r = 0)": ("ct.where(ccols2 == ref_row, 1.0, 0.0)", "ct.where(ccols2 == ref_row, 0.0, 0.0)"),
}  # fmt: skip


@pytest.mark.parametrize("bug", list(PLANTED_IN_LEVEL_GRADIENTS))
def test_bugs_planted_in_kdas_pair_gradients_fail_validation(bug, monkeypatch) -> None:
    right, wrong = PLANTED_IN_LEVEL_GRADIENTS[bug]
    with monkeypatch.context() as patch:
        plant(patch, "pairs_source", right, wrong)
        g, inputs = delta_rule_backward_graph("kda", (*CHUNK_EDGES, 130))
        assert not check(g, strong_decays(inputs, 5), "cutile.kda_bwd").passed, bug


# Bugs in kda's pair products by levels (both chunk kernels): each must fail validation, forward and backward, on
# gates strong enough that a reference row past its half's first overflows.
PLANTED_IN_LEVELS = {
    "a level left out": ("for level in range(6):", "for level in range(5):"),
    "the pairs of other blocks kept": ("same_block = pair_rows // (2 * half) == ccols2 // (2 * half)", "same_block = lower"),
    "the halves swapped": ("upper = (pair_rows // half) % 2 == 1", "upper = (pair_rows // half) % 2 == 0"),
    "the reference one row into its half": ("ref_row = pair_rows - pair_rows % (2 * half) + half",
                                            "ref_row = pair_rows - pair_rows % (2 * half) + half + 1"),
    "the reference row not selected (b_r = 0)": ("ct.where(ccols2 == ref_row, 1.0, 0.0)", "ct.where(ccols2 == ref_row, 0.0, 0.0)"),
    "the earlier row's decay left out": ("earlier = kp * ct.where(upper, 0.0, e)",
                                         "earlier = kp * ct.where(upper, 0.0, 1.0)"),
    "QK's diagonal left out": ("qk = ct.where(pair_rows == ccols2, ct.sum(qt * kt, axis=1, keepdims=True), 0.0)",
                               "qk = zero_cc"),
}  # fmt: skip


@pytest.mark.parametrize("bug", list(PLANTED_IN_LEVELS))
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_bugs_planted_in_kdas_pair_products_fail_validation(bug, backward, monkeypatch) -> None:
    right, wrong = PLANTED_IN_LEVELS[bug]
    make = delta_rule_backward_graph if backward else delta_rule_graph
    with monkeypatch.context() as patch:
        plant(patch, "chunks_source", right, wrong)
        g, inputs = make("kda", (*CHUNK_EDGES, 130))
        assert not check(g, strong_decays(inputs, 5), "cutile.kda" + "_bwd" * backward).passed, bug


@pytest.mark.parametrize("compute", ["float32", "bfloat16"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_kdas_reference_rows_are_exact_under_the_strongest_gates(backward, compute, monkeypatch) -> None:
    """Gates to -20,000 a token in half the channels put a chunk's b past 2^20, where b rounded to TF32 is up to
    256 off: a reference row's b taken that way would lift an exponent past 88 (inf, then inf x 0). Taken exactly
    (three TF32 parts, or bf16 ones in the backward at bf16 products) no exponent is above 0 and validation passes;
    the one-part selection fails."""
    make = delta_rule_backward_graph if backward else delta_rule_graph
    builder = "cutile.kda" + "_bwd" * backward

    def graph() -> tuple[sigdnn.Graph, dict[str, np.ndarray]]:
        g, inputs = make("kda", (*CHUNK_EDGES, 130))
        g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
        return g, inputs

    g, inputs = graph()
    gate = -np.random.default_rng(11).uniform(0, 20_000, inputs["g"].shape)
    gate[..., ::2] *= 1e-6
    hostile = {**inputs, "g": gate.astype(np.float32)}
    report = check(g, hostile, builder)
    assert report.passed, report.table()
    source = "pairs_source" if backward else "chunks_source"
    right = "ct.mma(select, bh, ct.mma(select, bm, ct.mma(select, bl, "
    with monkeypatch.context() as patch:
        plant(patch, source, right, "ct.mma(select, bh, ct.mma(select, bm * 0.0, ct.mma(select, bl * 0.0, ")
        g, _ = graph()
        assert not check(g, hostile, builder).passed


@pytest.mark.parametrize("compute", ["float32", "float16", "bfloat16"])
def test_kdas_reference_rows_are_selected_by_bf16_mmas_in_the_backward_at_bf16_products(compute) -> None:
    """The levels' one-hot selections run as bf16 MMAs in the backward's chunk kernel and pair launch at bf16
    products, as TF32 ones in the forward's chunk kernel and at any other compute dtype (the kernel texts say so)."""
    shape = delta_rule_kernel.DeltaRuleShape(
        2, 16, 16, True, True, 0.5, False, False, products=delta_rule_kernel.products_of(sigdnn.DataType(compute))
    )
    texts = {
        "forward chunks": delta_rule_kernel.chunks_source(shape, backward=False).text,
        "backward chunks": delta_rule_kernel.chunks_source(shape, backward=True).text,
        "pairs": delta_rule_kernel.pairs_source(shape).text,
    }
    for name, text in texts.items():
        kind = "bfloat16" if compute == "bfloat16" and name != "forward chunks" else "tfloat32"
        selection = f"select = ct.astype(ct.where(ccols2 == ref_row, 1.0, 0.0), ct.{kind})"
        parts = [f"bh = ct.astype(b{'p' * (name != 'pairs')}, ct.{kind})", f"bm = ct.astype(b_rest, ct.{kind})"]
        assert all(line in text for line in (selection, *parts)), (name, compute)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_kdas_levels_take_the_keys_in_parts(backward, monkeypatch) -> None:
    """At K = 70 (KP 128) each level's products go in two parts of 64 key columns: validation passes on strong
    gates, and fails when the second part reads the first's decays or its keys' products are dropped."""
    make = delta_rule_backward_graph if backward else delta_rule_graph
    builder = "cutile.kda" + "_bwd" * backward
    g, inputs = make("kda", (*CHUNK_EDGES, 130), kd=70, vd=8)
    shape = delta_rule_kernel.DeltaRuleShape(2, 70, 8, True, True, 0.5, True, True)
    assert "bp = ct.extract(b, (0, 1), (C, KP // 2))" in delta_rule_kernel.chunks_source(shape, backward=backward).text
    report = check(g, strong_decays(inputs, 7), builder)
    assert report.passed, report.table()
    for right, wrong in (
        ("bp = ct.extract(b, (0, 1), (C, KP // 2))", "bp = ct.extract(b, (0, 0), (C, KP // 2))"),
        ("kp = ct.extract(kt, (0, 1), (C, KP // 2))", "kp = ct.extract(kt, (0, 0), (C, KP // 2))"),
    ):
        with monkeypatch.context() as patch:
            plant(patch, "chunks_source", right, wrong)
            g, inputs = make("kda", (*CHUNK_EDGES, 130), kd=70, vd=8)
            assert not check(g, strong_decays(inputs, 7), builder).passed, wrong
