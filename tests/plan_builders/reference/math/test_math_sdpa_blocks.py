"""sdpa's defaults and its block-wise scores, held to the module's claims.

Defaults against torch's scaled_dot_product_attention (no mask, no stats);
the score blocks by traced peak memory: the docstring's 2 MiB of float64
scores a block, where one 1024 x 1024 score matrix would take 8 MiB; the
blocks themselves under a 12-score budget, against counts worked by hand
and by enumerating every (batch, kv head, query head, row) they cover.
"""

from __future__ import annotations

import importlib
import itertools
import tracemalloc

import numpy as np
import pytest
from math_oracles import import_torch

from sigdnn.plan_builders.reference.math import sdpa, sdpa_backward

sdpa_module = importlib.import_module("sigdnn.plan_builders.reference.math.sdpa")  # the package's sdpa is the function
torch = import_torch()


def qkv(seq: int, d: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seq)
    return tuple(rng.standard_normal((1, 2, seq, d)) for _ in range(4))  # type: ignore[return-value]


def test_defaults_are_unmasked_and_without_stats() -> None:
    q, k, v, do = qkv(3)
    qt, kt, vt = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    want = torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, scale=0.5)
    want.backward(torch.tensor(do))
    o, stats = sdpa(q, k, v, 0.5)
    assert stats is None
    np.testing.assert_allclose(o, want.detach().numpy(), rtol=1e-12, atol=1e-14)
    _, full_stats = sdpa(q, k, v, 0.5, generate_stats=True)
    grads = sdpa_backward(q, k, v, o, do, full_stats, 0.5)
    for got, ref in zip(grads, (qt.grad, kt.grad, vt.grad)):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-11, atol=1e-13)


def traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_scores_are_computed_a_block_at_a_time() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 1024, 8)) for _ in range(3))
    block = 2 << 20
    forward = traced_peak(lambda: sdpa(q, k, v, 0.3, generate_stats=True))
    assert forward < 3 * block, forward  # a block of scores and its exps' product: not the 8 MiB matrix
    o, stats = sdpa(q, k, v, 0.3, generate_stats=True)
    backward = traced_peak(lambda: sdpa_backward(q, k, v, o, q, stats, 0.3))
    assert backward < 4 * block, backward  # p and ds of one block, dq / dk / dv


def spans(blk) -> tuple[tuple[int, int], ...]:
    return tuple((s.start, s.stop) for s in (blk.batches, blk.heads, blk.groups, blk.rows))


# (B, Hkv, G, Sq, Skv) -> the blocks a 12-score budget gives, worked by hand: fill rows first, then
# query heads of the group once a block holds every row, kv heads once it holds every group, then batches.
HAND_WORKED = {
    # 2 rows x 3 keys = 6 scores, both query heads 12: one kv head and batch a block
    (2, 3, 2, 2, 3): [((b, b + 1), (h, h + 1), (0, 2), (0, 2)) for b in range(2) for h in range(3)],
    # one row of 3 keys, the one query head, both kv heads: 6 scores; two batches fill 12
    (3, 2, 1, 1, 3): [((0, 2), (0, 2), (0, 1), (0, 1)), ((2, 3), (0, 2), (0, 1), (0, 1))],
    (1, 1, 4, 1, 3): [((0, 1), (0, 1), (0, 4), (0, 1))],  # 4 query heads x 3 keys = 12
    # a row of 20 keys is over the budget: a block is never less than one row
    (1, 1, 1, 3, 20): [((0, 1), (0, 1), (0, 1), (r, r + 1)) for r in range(3)],
    (1, 1, 1, 20, 1): [((0, 1), (0, 1), (0, 1), (0, 12)), ((0, 1), (0, 1), (0, 1), (12, 20))],  # 12 one-key rows
    # 2 rows of 5 keys (10 scores) a block; never a second query head beside a partial set of rows
    (1, 1, 2, 5, 5): [((0, 1), (0, 1), (g, g + 1), r) for g in range(2) for r in ((0, 2), (2, 4), (4, 5))],
    # a row of 8 keys: a second query head (16) or kv head or batch would pass the budget
    (1, 2, 2, 1, 8): [((0, 1), (h, h + 1), (g, g + 1), (0, 1)) for h in range(2) for g in range(2)],
    (2, 2, 1, 1, 8): [((b, b + 1), (h, h + 1), (0, 1), (0, 1)) for b in range(2) for h in range(2)],
}


@pytest.mark.parametrize("shape", sorted(HAND_WORKED), ids=str)
def test_blocks_fill_the_budget_innermost_axis_first(shape, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sdpa_module, "_BLOCK_SCORES", 12)
    assert [spans(b) for b in sdpa_module._blocks(*shape)] == HAND_WORKED[shape]


def test_blocks_cover_every_row_once_within_the_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    budget = 12
    monkeypatch.setattr(sdpa_module, "_BLOCK_SCORES", budget)
    for nb, hkv, groups, sq, skv in itertools.product((1, 2, 3), (1, 2), (1, 2, 3), (1, 2, 5), (1, 3, 7, 13)):
        seen = np.zeros((nb, hkv, groups, sq), dtype=int)
        for blk in sdpa_module._blocks(nb, hkv, groups, sq, skv):
            seen[blk.batches, blk.heads, blk.groups, blk.rows] += 1
            rows = seen[blk.batches, blk.heads, blk.groups, blk.rows].size
            assert rows * skv <= budget or rows == 1, (nb, hkv, groups, sq, skv, spans(blk))
        assert (seen == 1).all(), (nb, hkv, groups, sq, skv)
