"""The delta rule's walks take the longest sequences first: the ranking kernel's order and the walks' block order.

The ranking (``delta_rule_kernel.order_source``) runs on the emulator
against a sort written here; the walks' first blocks are launched alone to
see which (sequence, head, value block) each takes. Outputs do not depend on
the order (the emulated validation tests show that in both block orders):
only which walks the GPU starts first does.
"""

from __future__ import annotations

import numpy as np
import pytest
from delta_rule_cases import MANY_LENGTHS, delta_rule_backward_graph, delta_rule_graph
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.plan_builders.cutile import emulator
from sigdnn.plan_builders.cutile.backend import EmulatedBackend
from sigdnn.plan_builders.cutile.delta_rule import CutileGdnBuilder, CutileKdaBwdBuilder
from sigdnn.plan_builders.cutile.delta_rule_kernel import (
    ORDER_LIMIT,
    RANKED,
    DeltaRuleShape,
    forward_source,
    order_blocks,
    order_source,
)


def ranked(cu: np.ndarray, sequences: int | None = None) -> np.ndarray:
    """The ranking kernel's order for ``cu`` (its text chosen for ``sequences``, by default cu's own count)."""
    count = len(cu) - 1
    order = np.full(count, -1, dtype=np.int32)
    kernel = EmulatedBackend().kernel(order_source(count if sequences is None else sequences))
    emulator.launch(None, (order_blocks(count), 1, 1), kernel, (cu, order))
    return order[:count]


def longest_first(cu: np.ndarray) -> list[int]:
    """Sequence indices by length, longest first, ties by index; a start below 0 read as 0 and a stop below its
    start as the start (Python integers: no wrap)."""
    starts = [max(int(c), 0) for c in cu[:-1]]
    lengths = [max(int(stop), start) - start for start, stop in zip(starts, cu[1:], strict=True)]
    return sorted(range(len(lengths)), key=lambda n: (-lengths[n], n))


@pytest.mark.parametrize(
    "cu",
    [
        np.array([0, 5, 75, 145, 146, 276], dtype=np.int32),  # a tie (70, 70) kept in index order
        np.array([0, 3], dtype=np.int32),
        np.array([0, 0, 0, 9, 9], dtype=np.int64),  # empty sequences
        np.array([50, 10, 400, -7, 2**31 - 1], dtype=np.int32),  # hostile: decreasing, negative, past T
        np.array([0, 2**62, -(2**62), 5], dtype=np.int64),
    ],
    ids=["tie", "one", "empty", "hostile32", "hostile64"],
)
def test_the_ranking_orders_the_sequences_longest_first(cu) -> None:
    order = ranked(cu)
    assert order.tolist() == longest_first(cu)


@pytest.mark.parametrize("count", [RANKED - 1, RANKED, RANKED + 1, 3 * RANKED + 5])
def test_the_ranking_is_a_permutation_across_blocks(count) -> None:
    """Several blocks of RANKED sequences, each compared against all of them in tiles; many ties (lengths 0-9)."""
    rng = np.random.default_rng(count)
    cu = np.concatenate([[0], np.cumsum(rng.integers(0, 10, count))]).astype(np.int32)
    assert ranked(cu).tolist() == longest_first(cu)


def test_past_the_limit_the_walks_take_the_sequences_in_turn() -> None:
    """Past ORDER_LIMIT sequences the ranking's N^2 comparisons are skipped: the order is the identity."""
    cu = np.array([0, 1, 30, 31, 100], dtype=np.int32)
    assert ranked(cu, ORDER_LIMIT).tolist() == longest_first(cu)
    assert ranked(cu, ORDER_LIMIT + 1).tolist() == [0, 1, 2, 3]
    for sequences, ranks in ((ORDER_LIMIT, True), (ORDER_LIMIT + 1, False)):
        g, _ = delta_rule_graph("gdn", (1,) * sequences, heads=1, kd=8, vd=8)
        (_, ranking, _), _ = CutileGdnBuilder().launches(g.nodes[-1], g)
        assert ("for step in range" in ranking.source.text) == ranks
        assert ranking.grid == (-(-sequences // RANKED), 1, 1)


def test_the_backward_walks_share_the_forward_walks_order() -> None:
    """One ranking before the backward's two walks, both reading its order."""
    g, _ = delta_rule_backward_graph("kda", (64, 65, 1), heads=2, kd=8, vd=128)
    (_, ranking, states, reverse, *_), _ = CutileKdaBwdBuilder().launches(g.nodes[0], g)
    assert ranking.source.prefix == "delta_rule_order"
    assert states.args[3] == reverse.args[5] == ranking.args[1]
    assert "n = ct.gather(order, walk // (H * (VP // VW)))" in states.source.text
    g, _ = delta_rule_backward_graph("kda", (7,), heads=2, kd=8, vd=8)
    (_, ranking, *_), _ = CutileKdaBwdBuilder().launches(g.nodes[0], g)
    assert ranking.args[1].shape == (1,)  # one int32 a sequence


@pytest.mark.parametrize("first", [1, 2, 3, 4, 5])
def test_the_walks_first_blocks_take_the_longest_sequence_head_by_head(first) -> None:
    """The forward walk's first blocks alone (two heads, two value blocks of 64: TF32 products), given the order
    [2, 0, 1]: block b takes rank b // 4, head b // 2 % 2, value block b % 2, and writes those outputs only."""
    heads, vd, lengths = 2, 128, (3, 1, 70)
    shape = DeltaRuleShape(heads, 8, vd, False, False, 1.0, False, False, products="tfloat32")
    tokens, rng = sum(lengths), np.random.default_rng(0)
    q, k = (rng.standard_normal(tokens * heads * 8).astype(np.float32) for _ in range(2))
    v = rng.standard_normal(tokens * heads * vd).astype(np.float32)
    g, beta = np.zeros(tokens * heads, np.float32), np.full(tokens * heads, 0.5, np.float32)
    cu = np.array([0, 3, 4, 74], dtype=np.int32)
    order = ranked(cu)
    assert order.tolist() == [2, 0, 1]
    work = np.zeros(10 * heads * 64 * 64, np.float32)  # QK and T of every chunk slot: zero is enough here
    o = np.full((tokens, heads, vd), np.nan, np.float32)
    kernel = EmulatedBackend().kernel(forward_source(shape))
    emulator.launch(None, (first, 1, 1), kernel, (q, k, v, g, beta, cu, order, o, work, work, o.reshape(-1), o))
    untouched = np.ones(o.shape, bool)
    for b in range(first):
        n, head, block = order[b // 4], b // 2 % 2, b % 2
        untouched[cu[n] : cu[n + 1], head, block * 64 : (block + 1) * 64] = False
    assert (np.isnan(o) == untouched).all()


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_many_sequences_validate_through_a_ranking_of_several_blocks(backward, monkeypatch) -> None:
    """150 sequences of 1-130 tokens: three ranking blocks, each comparing against three tiles of sequences, and
    walks that take them longest first; gdn forward and backward against the float64 recurrence."""
    make_available(monkeypatch)
    make = delta_rule_backward_graph if backward else delta_rule_graph
    g, inputs = make("gdn", MANY_LENGTHS, heads=2, kd=16, vd=16)
    report = sigdnn.validate(g, inputs, executor=emulated_executor(), truth="cpu")
    assert report.builders == {"n": "cutile.gdn_bwd" if backward else "cutile.gdn"}
    assert report.passed, report.table()
