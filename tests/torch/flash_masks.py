"""flash-attention's mask written out, the oracle of the tests of its call signatures (varlen and dense), and
the forward + backward comparison those tests share."""

from __future__ import annotations

from collections.abc import Sequence

import torch


def flash_mask(sq: int, sk: int, causal: bool, window: tuple[int, int]) -> torch.Tensor:
    """[Sq, Sk] True where flash-attention lets query i see key j: i + Sk - Sq - left <= j <= i + Sk - Sq + right
    (right 0 when causal; -1: unbounded)."""
    i, j = torch.arange(sq)[:, None] + sk - sq, torch.arange(sk)[None, :]
    left, right = window
    right = 0 if causal else right
    keep = torch.ones(sq, sk, dtype=torch.bool)
    if right >= 0:
        keep &= j <= i + right
    if left >= 0:
        keep &= j >= i - left
    return keep


def assert_same_with_gradients(
    ours: torch.Tensor,
    theirs: torch.Tensor,
    leaves: Sequence[torch.Tensor],
    twins: Sequence[torch.Tensor],
    generator: torch.Generator,
) -> None:
    """float64 outputs equal within 1e-12, and so the gradients of ``leaves`` (ours) and ``twins`` (the oracle's)
    after one random dO through both."""
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    d_o = torch.randn(ours.shape, dtype=torch.float64, generator=generator)
    ours.backward(d_o)
    theirs.backward(d_o)
    for mine, reference in zip(leaves, twins, strict=True):
        torch.testing.assert_close(mine.grad, reference.grad, rtol=1e-12, atol=1e-12)
