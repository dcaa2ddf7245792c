"""flash-attention's mask written out, the oracle of the tests of its call signatures (varlen and dense)."""

from __future__ import annotations

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
