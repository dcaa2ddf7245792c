"""Shared helpers for the reference-math tests: memory layouts, tolerance checks, hypothesis pieces.

Nothing here computes an op: the oracles (torch float64, loops, mpmath,
finite differences) live in each test module, next to what they check.

Tolerances are stated in units of EPS = 2^-52 (one float64 ulp at 1.0)
times a magnitude S that each test derives from the computation, usually
sum |terms| of the reductions involved: |got - want| <= k * EPS * S.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest
from hypothesis import strategies as st

EPS = float(np.finfo(np.float64).eps)


def import_torch():
    """torch (skipping the test module without it), on one thread: on tiny tensors its thread
    pool costs ~50 ms a call on a busy 2-core machine, and one thread is as exact."""
    torch = pytest.importorskip("torch")
    torch.set_num_threads(1)
    return torch


LAYOUTS = ("contiguous", "channels_last", "padded", "reversed", "permuted")


def in_layout(a: np.ndarray, kind: str, seed: int = 0) -> np.ndarray:
    """A view with a's logical values in another memory layout.

    channels_last: axis 1 innermost; padded: gaps between elements, filled
    with NaN so that a read outside the logical elements poisons the result;
    reversed: negative strides on every axis; permuted: axes stored in a
    random order.
    """
    a = np.asarray(a, dtype=np.float64)
    if kind == "contiguous":
        return a.copy()
    if kind == "channels_last":
        if a.ndim < 3:
            return a.copy()
        return np.moveaxis(np.ascontiguousarray(np.moveaxis(a, 1, -1)), -1, 1)
    if kind == "padded":
        buf = np.full(tuple(d + 1 + (i % 2) for i, d in enumerate(a.shape)), np.nan)
        view = buf[tuple(slice(0, d) for d in a.shape)]
        view[...] = a
        return view
    if kind == "reversed":
        axes = tuple(range(a.ndim))
        return np.flip(np.ascontiguousarray(np.flip(a, axes)), axes)
    if kind == "permuted":
        perm = np.random.default_rng(seed).permutation(a.ndim)
        return np.ascontiguousarray(a.transpose(perm)).transpose(np.argsort(perm))
    raise ValueError(kind)


def assert_within(got: np.ndarray, want: np.ndarray, scale: np.ndarray | float, ulps: float, what: str = "") -> None:
    """|got - want| <= ulps * EPS * scale elementwise; NaN where want is NaN, equal infinities."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), want.shape)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan), f"{what}: NaN at {np.argwhere(np.isnan(got) != nan)[:5].tolist()}"
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), f"{what}: infinities differ"
    ok = ~(nan | inf)
    err = np.abs(got[ok] - want[ok])
    bound = ulps * EPS * scale[ok]
    if err.size and not (err <= bound).all():
        i = int(np.argmax(err - bound))
        where = np.argwhere(ok)[i].tolist()
        raise AssertionError(
            f"{what}: {int((err > bound).sum())} of {err.size} elements beyond {ulps} * EPS * S; "
            f"worst at {where}: got {got[ok][i]!r}, want {want[ok][i]!r}, |err| / (EPS * S) = "
            f"{err[i] / (EPS * scale[ok][i]) if scale[ok][i] else math.inf:.3g}"
        )


def check_gradient(
    f: Callable[[np.ndarray], float],
    x: np.ndarray,
    grad: np.ndarray,
    rng: np.random.Generator,
    directions: int = 3,
    h: float = 1e-5,
) -> None:
    """grad . d equals the central difference (f(x + h d) - f(x - h d)) / 2h along random directions d.

    Bound: 1e-6 * (sum |grad| |d| + |f(x)|). The central difference is off by
    O(h^2) ~ 1e-10 times the third derivative (truncation) plus O(EPS |f| / h)
    ~ 2e-11 |f| (rounding), far inside it for the smooth functions of O(1)
    data tested here; a wrong gradient formula is off by O(1) of that scale.
    """
    fx = abs(f(x))
    for _ in range(directions):
        d = rng.standard_normal(x.shape)
        numeric = (f(x + h * d) - f(x - h * d)) / (2 * h)
        analytic = float(np.sum(grad * d))
        bound = 1e-6 * (float(np.sum(np.abs(grad) * np.abs(d))) + fx)
        assert abs(numeric - analytic) <= bound, f"gradient . d = {analytic!r}, central difference {numeric!r}"


def dims(min_side: int = 1, max_side: int = 5) -> st.SearchStrategy[int]:
    """Small extents, weighted to 1 and primes (the cases that break reshapes and strides)."""
    return st.one_of(st.sampled_from([1, 2, 3, 5, 7]), st.integers(min_side, max_side)).filter(
        lambda d: min_side <= d <= max(max_side, 7)
    )


def shapes(rank: Sequence[int] | int, max_side: int = 5) -> st.SearchStrategy[tuple[int, ...]]:
    ranks = [rank] if isinstance(rank, int) else list(rank)
    return st.sampled_from(ranks).flatmap(lambda r: st.tuples(*[dims(1, max_side)] * r))
