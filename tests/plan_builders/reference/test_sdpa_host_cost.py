"""The reference sdpa's host cost follows the declared work, and its score scratch counts against the limits.

Regression cases of issue #32: a batch of 2^20 sequences of length 1 made
one Python block per (batch, head, row block), about 10,000x what the
work limit assumes; a query head group of 2^12 heads against 2^12 keys made
one block of 2^24 float64 scores (128 MiB) that no limit counted.
"""

from __future__ import annotations

import time
import tracemalloc

import numpy as np
import pytest

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.graph import Limits
from sigdnn.plan_builders.reference.math import sdpa as sdpa_math
from sigdnn.plan_builders.reference.math import sdpa_backward

sdpa_module = __import__("sigdnn.plan_builders.reference.math.sdpa", fromlist=["_blocks"])


def counted_blocks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    seen = [0]
    original = sdpa_module._blocks

    def counting(*args):
        blocks = list(original(*args))
        seen[0] += len(blocks)
        return blocks

    monkeypatch.setattr(sdpa_module, "_blocks", counting)
    return seen


def test_many_short_sequences_go_in_a_few_batched_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1 << 16, 2, 1, 3)) for _ in range(3))
    seen = counted_blocks(monkeypatch)
    o, stats = sdpa_math(q, k, v, 0.5, generate_stats=True)
    sdpa_backward(q, k, v, o, q, stats, 0.5)
    assert seen[0] <= 2, seen[0]  # one block of 2^17 scores each way, not 2^17 blocks
    np.testing.assert_allclose(o, v)  # one key: softmax weight 1


def test_a_batch_of_a_million_length_one_sequences_runs_in_seconds() -> None:
    g = sigdnn.Graph("wide", io_dtype="float32")
    q = g.tensor("q", (1 << 20, 1, 1, 1))
    g.sdpa(q, q, q, 0.5, generate_stats=True, name="a")[0].set_output(True).set_name("o")
    ex = sigdnn.Executor("reference")
    plan = ex.prepare(g)
    x = np.random.default_rng(1).standard_normal((1 << 20, 1, 1, 1)).astype(np.float32)
    start = time.perf_counter()
    out = ex.execute(plan, {"q": x})
    assert time.perf_counter() - start < 10  # 51 s before (one Python block per batch entry)
    np.testing.assert_array_equal(out["o"], x)


def test_a_wide_head_group_holds_a_bounded_score_block() -> None:
    """2^12 query heads sharing one kv head of 2^12 keys: 48 KiB of tensors, 128 MiB of scores in one block before."""
    g = sigdnn.Graph("group", io_dtype="float32")
    q = g.tensor("q", (1, 1 << 12, 1, 1))
    k = g.tensor("k", (1, 1, 1 << 12, 1))
    g.sdpa(q, k, k, 0.5, name="a")[0].set_output(True).set_name("o")
    ex = sigdnn.Executor("reference", limits=Limits(max_total_bytes=64 << 20))
    plan = ex.prepare(g)
    rng = np.random.default_rng(2)
    ins = {"q": rng.standard_normal((1, 1 << 12, 1, 1)).astype(np.float32)}
    ins["k"] = rng.standard_normal((1, 1, 1 << 12, 1)).astype(np.float32)
    tracemalloc.start()
    try:
        out = ex.execute(plan, ins)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 32 << 20, peak
    s = 0.5 * ins["q"][0, :, 0, :].astype(np.float64) * ins["k"][0, 0, :, 0].astype(np.float64)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p @ ins["k"][0, 0, :, 0].astype(np.float64)) / p.sum(-1)
    np.testing.assert_allclose(out["o"][0, :, 0, 0], want, rtol=1e-5)


@pytest.mark.parametrize("backward", [False, True])
def test_the_score_scratch_counts_against_the_byte_limit(backward: bool) -> None:
    """One row of 2^22 keys is 32 MiB of float64 scores per block: beyond a limit its tensors fit in."""
    g = sigdnn.Graph("long", io_dtype="float16")
    q = g.tensor("q", (1, 1, 1, 1))
    k = g.tensor("k", (1, 1, 1 << 22, 1))
    if backward:
        o, st = g.tensor("o", (1, 1, 1, 1)), g.tensor("st", (1, 1, 1, 1), dtype="float32")
        g.sdpa_backward(q, k, k, o, o, st, name="a")[0].set_output(True)
    else:
        g.sdpa(q, k, k, name="a")[0].set_output(True)
    long_tensors, long_ports, blocks = (3, 4, 4) if backward else (1, 2, 3)  # k (dk, dv); k, v (dk, dv); scores
    tensors_and_widening = (1 << 22) * (2 * long_tensors + 8 * long_ports) + (1 << 20)
    with pytest.raises(GraphError, match=r"node 'a': needs \d+ bytes of scratch"):
        sigdnn.Executor(limits=Limits(max_total_bytes=tensors_and_widening)).prepare(g)
    sigdnn.Executor(limits=Limits(max_total_bytes=tensors_and_widening + blocks * 8 * (1 << 22))).prepare(g)
