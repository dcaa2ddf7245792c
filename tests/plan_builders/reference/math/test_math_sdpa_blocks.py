"""sdpa's defaults and its block-wise scores, held to the module's claims.

Defaults against torch's scaled_dot_product_attention (no mask, no stats);
the score blocks by traced peak memory: the docstring's 2 MiB of float64
scores a block, where one 1024 x 1024 score matrix would take 8 MiB.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
from math_oracles import import_torch

from sigdnn.plan_builders.reference.math import sdpa, sdpa_backward

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
