"""pooling_forward / pooling_backward against torch (max_pool / avg_pool, float64 autograd),
brute-force loops (asymmetric padding, dilation, exclude-pad), hand-worked tie and NaN cases,
and central differences.

Max pooling is exact, and so is its gradient when dy holds integers (the
gradients of overlapping windows then add exactly in any order): equality. Averages sum at most
prod(window) terms and divide once: within (taps + 2) * EPS * S, S the
average of |x| over the window (the backward likewise per input position);
against torch the factor doubles.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from math_oracles import LAYOUTS, assert_within, check_gradient, import_torch, in_layout

from sigdnn.plan_builders.reference.math import pooling_backward, pooling_forward

torch = import_torch()
F = torch.nn.functional
AVERAGES = ("average_count_include_pad", "average_count_exclude_pad")


def torch_pool(x, dy, mode, window, pad, stride, dilation):
    """torch's y and dx (symmetric padding only, as torch takes it)."""
    s = len(window)
    xt = torch.tensor(x, requires_grad=True)
    if mode == "max":
        y = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[s](xt, window, stride, pad, dilation)
    else:
        fn = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[s]
        y = fn(xt, window, stride, pad, count_include_pad=mode == "average_count_include_pad")
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), xt.grad.numpy()


def loop_pool(x, dy, mode, window, pre, post, stride, dilation):
    """y and dx by visiting every window: max from its first real element on (greater or NaN wins)."""
    size = x.shape[2:]
    out = [
        (s + a + b - d * (r - 1) - 1) // st + 1 for s, a, b, r, st, d in zip(size, pre, post, window, stride, dilation)
    ]
    y = np.zeros((*x.shape[:2], *out))
    dx = np.zeros(x.shape)
    for n, c, *o in itertools.product(range(x.shape[0]), range(x.shape[1]), *(range(e) for e in out)):
        real = []
        for r in itertools.product(*(range(e) for e in window)):
            pos = tuple(oi * st + ri * d - p for oi, ri, st, d, p in zip(o, r, stride, dilation, pre))
            if all(0 <= p < s for p, s in zip(pos, size)):
                real.append((n, c, *pos))
        g = dy[(n, c, *o)]
        if mode == "max":
            best = real[0]
            for pos in real[1:]:
                if x[pos] > x[best] or math.isnan(x[pos]):
                    best = pos
            y[(n, c, *o)] = x[best]
            dx[best] += g
        else:
            count = len(real) if mode == "average_count_exclude_pad" else math.prod(window)
            y[(n, c, *o)] = math.fsum(x[pos] for pos in real) / count
            for pos in real:
                dx[pos] += g / count
    return y, dx


CASES = [
    # x shape, window, pre, post, stride, dilation
    ((2, 3, 7, 8), (3, 3), (1, 1), (1, 1), (2, 2), (1, 1)),
    ((1, 2, 9, 9), (2, 3), (1, 0), (1, 0), (1, 2), (1, 1)),
    ((2, 2, 10, 11), (3, 2), (1, 1), (1, 1), (2, 1), (2, 2)),
    ((1, 2, 5, 6, 7), (2, 2, 3), (1, 0, 1), (1, 0, 1), (2, 1, 2), (1, 1, 1)),
    ((3, 2, 9), (4,), (2,), (2,), (3,), (1,)),
    ((1, 1, 4, 4), (2, 2), (0, 0), (0, 0), (2, 2), (1, 1)),
]


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "reversed"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_torch(case, layout: str) -> None:
    shape, window, pre, post, stride, dil = case
    rng = np.random.default_rng(sum(shape))
    x = np.round(rng.standard_normal(shape) * 2) / 2  # halves: plenty of ties
    xt = torch.tensor(x)
    y_shape = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[len(window)](xt, window, stride, pre, dil).shape
    dy = np.round(rng.standard_normal(tuple(y_shape)) * 8)  # integers: overlapping windows' gradients add exactly
    xl, dyl = in_layout(x, layout, 1), in_layout(dy, layout, 2)
    for mode in ("max", *(AVERAGES if dil == (1,) * len(window) else ())):
        y_t, dx_t = torch_pool(x, dy, mode, window, pre, stride, dil)
        y = pooling_forward(xl, mode, window, pre, post, stride, dil)
        dx = pooling_backward(dyl, xl, mode, window, pre, post, stride, dil)
        if mode == "max":
            np.testing.assert_array_equal(y, y_t, err_msg="max y")
            np.testing.assert_array_equal(dx, dx_t, err_msg="max dx: the first maximum takes the gradient")
        else:
            taps = math.prod(window)
            s_y = torch_pool(np.abs(x), np.abs(dy), mode, window, pre, stride, dil)
            assert_within(y, y_t, s_y[0], 2 * (taps + 2), f"{mode} y")
            assert_within(dx, dx_t, s_y[1], 2 * (taps + 2), f"{mode} dx")


@pytest.mark.parametrize("mode", ["max", *AVERAGES])
@pytest.mark.parametrize(
    "case",
    [
        ((1, 2, 5, 6), (3, 2), (2, 0), (0, 1), (2, 1), (1, 2)),  # asymmetric padding and dilation: torch has neither
        ((2, 1, 7), (3,), (0,), (2,), (2,), (2,)),
        ((1, 1, 3, 4, 4), (2, 3, 2), (1, 1, 0), (0, 2, 1), (1, 2, 2), (2, 1, 1)),
    ],
    ids=str,
)
def test_matches_loops(case, mode: str) -> None:
    shape, window, pre, post, stride, dil = case
    rng = np.random.default_rng(3)
    x = np.round(rng.standard_normal(shape) * 2) / 2
    y0 = pooling_forward(x, mode, window, pre, post, stride, dil)
    dy = np.round(rng.standard_normal(y0.shape) * 8)
    y_l, dx_l = loop_pool(x, dy, mode, window, pre, post, stride, dil)
    dx = pooling_backward(in_layout(dy, "permuted", 4), in_layout(x, "padded"), mode, window, pre, post, stride, dil)
    if mode == "max":
        np.testing.assert_array_equal(y0, y_l)
        np.testing.assert_array_equal(dx, dx_l)
    else:
        taps = math.prod(window)
        s_y, s_dx = loop_pool(np.abs(x), np.abs(dy), mode, window, pre, post, stride, dil)
        assert_within(y0, y_l, s_y, taps + 2, "y")
        assert_within(dx, dx_l, s_dx, taps + 2, "dx")


def test_ties_and_nan_follow_torch() -> None:
    """Equal maxima: the first in row-major window order takes the gradient; with overlapping
    windows an element may win several. NaN wins over numbers, the last NaN over earlier ones."""
    x = np.array([[[[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [0.0, 0.0, 0.0]]]])
    dy = np.arange(1.0, 5.0).reshape(1, 1, 2, 2)
    dx = pooling_backward(dy, x, "max", (2, 2), (0, 0), (0, 0), (1, 1))
    assert dx[0, 0].tolist() == [[1.0, 2.0, 0.0], [3.0, 4.0, 0.0], [0.0, 0.0, 0.0]]
    y_t, dx_t = torch_pool(x, dy, "max", (2, 2), (0, 0), (1, 1), (1, 1))
    np.testing.assert_array_equal(dx, dx_t)
    x = np.array([[[np.nan, 5.0, np.nan, 7.0, 1.0]]])
    dy = np.array([[[10.0, 20.0]]])
    y = pooling_forward(x, "max", (3,), (0,), (0,), (2,))
    dx = pooling_backward(dy, x, "max", (3,), (0,), (0,), (2,))
    y_t, dx_t = torch_pool(x, dy, "max", (3,), (0,), (2,), (1,))
    np.testing.assert_array_equal(y, y_t)
    np.testing.assert_array_equal(dx, dx_t)
    assert dx.ravel().tolist() == [0.0, 0.0, 30.0, 0.0, 0.0]


def test_padding_never_wins_even_against_minus_infinity() -> None:
    """A window of -inf and padding: y -inf, the gradient to the first real element, as torch."""
    x = np.full((1, 1, 3), -np.inf)
    dy = np.array([[[1.0, 2.0]]])
    y = pooling_forward(x, "max", (2,), (1,), (0,), (2,))
    dx = pooling_backward(dy, x, "max", (2,), (1,), (0,), (2,))
    _, dx_t = torch_pool(x, dy, "max", (2,), (1,), (2,), (1,))
    assert y.ravel().tolist() == [-np.inf, -np.inf]
    np.testing.assert_array_equal(dx, dx_t)
    assert dx.ravel().tolist() == [1.0, 2.0, 0.0]


def test_hand_worked_averages() -> None:
    """[1, 2, 3] with window 2, padding 1 each side, stride 2: windows {pad, 1}, {2, 3}."""
    x = np.array([[[1.0, 2.0, 3.0]]])
    inc = pooling_forward(x, "average_count_include_pad", (2,), (1,), (1,), (2,))
    exc = pooling_forward(x, "average_count_exclude_pad", (2,), (1,), (1,), (2,))
    assert inc.ravel().tolist() == [0.5, 2.5] and exc.ravel().tolist() == [1.0, 2.5]
    dy = np.array([[[4.0, 8.0]]])
    assert pooling_backward(dy, x, "average_count_include_pad", (2,), (1,), (1,), (2,)).ravel().tolist() == [
        2.0,
        4.0,
        4.0,
    ]
    assert pooling_backward(dy, x, "average_count_exclude_pad", (2,), (1,), (1,), (2,)).ravel().tolist() == [
        4.0,
        4.0,
        4.0,
    ]


@pytest.mark.parametrize("mode", ["max", *AVERAGES])
def test_gradients_are_central_differences(mode: str) -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 2, 5, 6))  # distinct values: max is smooth around x
    args = ((3, 2), (1, 0), (0, 1), (2, 2), (1, 2))
    dy = rng.standard_normal(pooling_forward(x, mode, *args).shape)
    dx = pooling_backward(dy, x, mode, *args)
    check_gradient(lambda v: float(np.sum(dy * pooling_forward(v, mode, *args))), x, dx, rng, h=1e-7)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="pooling mode"):
        pooling_forward(np.zeros((1, 1, 4)), "median", (2,), (0,), (0,), (1,))
    with pytest.raises(ValueError, match="not the pooled shape"):
        pooling_backward(np.zeros((1, 1, 4)), np.zeros((1, 1, 4)), "max", (2,), (0,), (0,), (1,))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    mode=st.sampled_from(["max", *AVERAGES]),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**31),
)
def test_generated_against_loops(data, mode: str, layout: str, seed: int) -> None:
    s = data.draw(st.integers(1, 3))
    window, pre, post, stride, dil, size = [], [], [], [], [], []
    for _ in range(s):
        r, d = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 2))
        p, q = (
            data.draw(st.integers(0, r - 1)),
            data.draw(st.integers(0, r - 1)),
        )  # padding < window: a real element each
        span = d * (r - 1) + 1
        window.append(r), dil.append(d), pre.append(p), post.append(q)
        stride.append(data.draw(st.integers(1, 3)))
        size.append(data.draw(st.integers(max(1, span - p - q, p + 1, q + 1), max(1, span - p - q, p + 1, q + 1) + 3)))
    shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 3)), *size)
    rng = np.random.default_rng(seed)
    x = np.round(rng.standard_normal(shape) * 2) / 2
    args = (tuple(window), tuple(pre), tuple(post), tuple(stride), tuple(dil))
    y = pooling_forward(in_layout(x, layout, seed), mode, *args)
    dy = np.round(rng.standard_normal(y.shape) * 8)
    dx = pooling_backward(in_layout(dy, layout, seed + 1), in_layout(x, layout, seed), mode, *args)
    y_l, dx_l = loop_pool(x, dy, mode, *args)
    if mode == "max":
        np.testing.assert_array_equal(y, y_l)
        np.testing.assert_array_equal(dx, dx_l)
    else:
        s_y, s_dx = loop_pool(np.abs(x), np.abs(dy), mode, *args)
        assert_within(y, y_l, s_y, math.prod(window) + 2, "y")
        assert_within(dx, dx_l, s_dx, math.prod(window) + 2, "dx")
