"""softmax / log-softmax / stats against torch float64, an mpmath oracle, hand-worked and extreme
cases, and every blocking strategy.

Bounds (EPS = 2^-52). e_j = exp(x_j - max) carries the rounding of x_j - max
amplified by exp: relative error ~ (|x_j - max| + 1) EPS. Summing n terms
adds (n - 1) ulps of the sum. Hence, with spread = sum_j p_j |x_j - max|
(p the softmax), y is within (n + 4) * EPS * y * (1 + |x - max| + spread),
log-softmax = (x - max) - log1p(rest) within (n + 4) * EPS * (|x - max| +
|log sum| + spread), stats the same with |max| for |x - max|. torch takes
log of the rounded sum (>= 1), off by up to n * EPS absolute: against torch
the log terms get + 1 in S and the factor doubles; where that matters
(log y ~ -1e-10) the test is against the exact value only.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from math_oracles import LAYOUTS, assert_within, import_torch, in_layout, shapes

from sigdnn.plan_builders.reference.math import normalization as norm
from sigdnn.plan_builders.reference.math import softmax

torch = import_torch()
mp = pytest.importorskip("mpmath")


def torch_softmax(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(softmax, log-softmax, logsumexp keepdims) over axes: torch's logsumexp, its exp / difference."""
    xt = torch.tensor(x)
    lse = torch.logsumexp(xt, dim=axes, keepdim=True)
    if len(axes) == 1:
        return torch.softmax(xt, axes[0]).numpy(), torch.log_softmax(xt, axes[0]).numpy(), lse.numpy()
    return torch.exp(xt - lse).numpy(), (xt - lse).numpy(), lse.numpy()


def exact_softmax(x: np.ndarray, axes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mp.mp.dps = 40
    X = np.vectorize(mp.mpf, otypes=[object])(x)
    E = np.vectorize(mp.exp, otypes=[object])(X)
    total = np.sum(E, axis=axes, keepdims=True)
    lse = np.vectorize(mp.log, otypes=[object])(total)
    f = np.vectorize(float, otypes=[np.float64])
    return f(E / total), f(X - lse), f(lse)


def bounds(x: np.ndarray, axes: tuple[int, ...], y, stats, torch_side: bool):
    """(k, S for y, S for log y, S for stats); torch_side adds torch's EPS-absolute log(sum) error."""
    n = math.prod(x.shape[a] for a in axes)
    m = np.max(x, axis=axes, keepdims=True)
    spread = np.sum(np.abs(y) * np.abs(x - m), axis=axes, keepdims=True)
    log_sum = np.abs(stats - m) + spread + (1.0 if torch_side else 0.0)
    k = 2 * (n + 4) if torch_side else n + 4
    return k, np.abs(y) * (1 + np.abs(x - m) + spread), np.abs(x - m) + log_sum, np.abs(m) + log_sum


CASES = [
    ((4, 5, 6), (2,)),
    ((4, 5, 6), (1,)),
    ((4, 5, 6), (0, 2)),
    ((2, 3, 70), (0, 2)),  # reduced axes on both sides of the kept one, long inner run
    ((3, 70, 2), (1,)),
    ((30, 2), (0,)),
    ((2, 3, 4), (0, 1, 2)),
    ((1, 1, 5), (2,)),
]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("shape", "axes"), CASES, ids=str)
def test_matches_torch_and_exact(shape, axes, layout: str) -> None:
    rng = np.random.default_rng(sum(shape))
    x = rng.standard_normal(shape) * 4
    xl = in_layout(x, layout, 2)
    y, stats = softmax(xl, axes)
    logy, stats2 = softmax(xl, axes, log=True)
    np.testing.assert_array_equal(stats, stats2)
    assert stats.shape == tuple(1 if i in axes else d for i, d in enumerate(shape))
    k, sy, slog, sst = bounds(x, axes, y, stats, torch_side=True)
    t_y, t_log, t_lse = torch_softmax(x, axes)
    assert_within(y, t_y, sy, k, "softmax vs torch")
    assert_within(logy, t_log, slog, k, "log-softmax vs torch")
    assert_within(stats, t_lse, sst, k, "stats vs torch")
    if x.size <= 120:
        k, sy, slog, sst = bounds(x, axes, y, stats, torch_side=False)
        e_y, e_log, e_lse = exact_softmax(x, axes)
        assert_within(y, e_y, sy, k, "softmax vs exact")
        assert_within(logy, e_log, slog, k, "log-softmax vs exact")
        assert_within(stats, e_lse, sst, k, "stats vs exact")


def test_hand_worked() -> None:
    """softmax([0, ln 3]) = [1/4, 3/4], stats ln 4; log-softmax [-ln 4, ln 3 - ln 4]."""
    x = np.array([[0.0, math.log(3.0)]])
    y, stats = softmax(x, (1,))
    assert_within(y, np.array([[0.25, 0.75]]), 1.0, 4)
    assert_within(stats, np.array([[math.log(4.0)]]), 2.0, 4)
    logy, _ = softmax(x, (1,), log=True)
    assert_within(logy, np.array([[-math.log(4.0), math.log(0.75)]]), 2.0, 4)


@pytest.mark.parametrize("axes", [(0,), (0, 2)])
def test_tied_maxima_over_outer_axes(axes: tuple[int, ...]) -> None:
    """Rows of several equal maxima, reduced over outer axes (the path that sums blocks' partial sums):
    column [1, 1, 0] gives log-softmax [-log(2 + 1/e)] * 2 + [-1 - log(2 + 1/e)], hand-worked, and stats
    1 + log(2 + 1/e)."""
    x = np.array([[1.0, 3.0], [1.0, 3.0], [0.0, 3.0]])[:, :, None] * np.ones((1, 1, 1 if axes == (0,) else 2))
    if axes == (0, 2):
        x[2, :, 1] = x[2, :, 0]
    logy, stats = softmax(x, axes, log=True)
    y, _ = softmax(x, axes)
    c = math.log(2 + math.exp(-1))
    per_column = np.array([[-c, -math.log(3.0)], [-c, -math.log(3.0)], [-1 - c, -math.log(3.0)]])
    want = per_column[:, :, None] * np.ones_like(x[:1, :1, :])
    if axes == (0, 2):  # two copies of each entry along axis 2: each probability halves
        want = want - math.log(2.0)
    assert_within(logy, want, np.abs(want) + 1, 4, "log y")
    assert_within(y, np.exp(want), np.exp(want), 4, "y")
    lse = np.array([1 + c, 3 + math.log(3.0)]) + (math.log(2.0) if axes == (0, 2) else 0.0)
    assert_within(stats.ravel(), lse, np.abs(lse), 4, "stats")


def test_large_values_neither_overflow_nor_lose_the_small_log() -> None:
    """[1000, 1000] -> [1/2, 1/2] (exp(1000) overflows); log-softmax of [-1000, 0] is
    [-1000, -log1p(e^-1000)] = [-1000, -0.0]: x - max is exact, so no digit of -1000 is lost."""
    y, stats = softmax(np.array([[1000.0, 1000.0]]), (1,))
    assert y.tolist() == [[0.5, 0.5]] and stats.item() == 1000.0 + math.log(2.0)
    logy, stats = softmax(np.array([[-1000.0, 0.0]]), (1,), log=True)
    assert logy.tolist() == [[-1000.0, 0.0]] and stats.item() == 0.0


def test_a_dominant_entry_keeps_its_tiny_log() -> None:
    """log-softmax of [0, -23]: log y0 = -log1p(e^-23) = -1.026e-10 to full relative accuracy
    (log of the rounded sum 1 + 1.026e-10 would be off by ~1e-6 relative), and stats too."""
    mp.mp.dps = 40
    x = np.array([[0.0, -23.0], [1e-3, -23.0]])
    logy, stats = softmax(x, (1,), log=True)
    for row in range(2):
        log_sum = mp.log(mp.exp(mp.mpf(x[row, 0])) + mp.exp(mp.mpf(x[row, 1])))
        want = [float(mp.mpf(v) - log_sum) for v in x[row]]
        spread = 23 * float(log_sum)  # p_1 |x_1 - max|, p_1 ~ log_sum
        assert_within(logy[row], np.array(want), np.abs(want) + spread, 4, f"log y row {row}")
        assert_within(stats[row], np.array([float(log_sum)]), abs(float(log_sum)) + spread, 4, f"stats row {row}")


def test_infinities_follow_torch() -> None:
    """A row of -inf: y NaN, stats -inf; a row holding +inf: y NaN, stats +inf; -inf entries get 0 / -inf."""
    x = np.array([[-np.inf, -np.inf], [1.0, -np.inf], [np.inf, 1.0], [np.nan, 0.0]])
    t_y, t_log, t_lse = torch_softmax(x, (1,))
    y, stats = softmax(x, (1,))
    logy, _ = softmax(x, (1,), log=True)
    np.testing.assert_array_equal(y, t_y)
    np.testing.assert_array_equal(logy, t_log)
    np.testing.assert_array_equal(stats, t_lse)


@pytest.mark.parametrize(("block", "inner"), [(3, 64), (5, 1), (40, 1000)])
def test_any_blocking_gives_the_same_results(block: int, inner: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 5, 7)) * 3
    want = [softmax(x, axes, log) for axes in ((2,), (0,), (0, 2), (1,)) for log in (False, True)]
    monkeypatch.setattr(norm, "_BLOCK_ELEMENTS", block)
    monkeypatch.setattr(norm, "_MIN_INNER", inner)
    got = [
        softmax(in_layout(x, "permuted", 3), axes, log) for axes in ((2,), (0,), (0, 2), (1,)) for log in (False, True)
    ]
    for (gy, gs), (wy, ws) in zip(got, want):
        assert_within(gy, wy, np.abs(wy) + 1, 32, "y")
        assert_within(gs, ws, np.abs(ws) + 1, 32, "stats")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes([1, 2, 3, 4]), data=st.data(), layout=st.sampled_from(LAYOUTS), seed=st.integers(0, 2**31))
def test_generated(shape, data, layout: str, seed: int) -> None:
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) * 5
    y, stats = softmax(in_layout(x, layout, seed), axes)
    logy, _ = softmax(in_layout(x, layout, seed), axes, log=True)
    k, sy, slog, sst = bounds(x, axes, y, stats, torch_side=True)
    t_y, t_log, t_lse = torch_softmax(x, axes)
    assert_within(y, t_y, sy, k, "softmax")
    assert_within(logy, t_log, slog, k, "log-softmax")
    assert_within(stats, t_lse, sst, k, "stats")


@pytest.mark.parametrize("log", [False, True])
def test_a_float64_input_is_read_not_overwritten_when_y_goes_to_a_sink(log: bool) -> None:
    """The row path computes a narrow input's block in its widened copy; a float64 x is not a copy (the
    caller's array), so y must not be computed there. Here y is rounded to float32 into the Sink."""
    from sigdnn.plan_builders.reference.math.sink import Sink

    x = np.random.default_rng(11).standard_normal((64, 100)) * 4
    before = x.copy()
    sink = Sink(np.full(x.shape, np.nan, np.float32), lambda out, v: np.copyto(out, v, casting="unsafe"), True)
    assert softmax(x, (1,), log, sink)[0] is None
    np.testing.assert_array_equal(x, before)
    want = (torch.log_softmax if log else torch.softmax)(torch.tensor(before), 1).numpy()
    np.testing.assert_array_equal(sink.array, want.astype(np.float32))
