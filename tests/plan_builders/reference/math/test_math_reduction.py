"""reduction (every mode, float64 and exact int64) against torch float64, brute-force loops
(math.fsum / Python integers), hand-worked cases and the empty / NaN / overflow conventions.

Bounds: a sum of n terms is within (n - 1) * EPS/2 * sum|terms| of the
exact value (any order); torch's is too, so they agree within n * EPS * S,
S = sum |terms|. Products: within n ulps of |product|. min / max / amax are
exact. norm2 = sqrt of a sum: within (n / 2 + 2) * EPS * norm. int64 is
exact: equality.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from math_oracles import LAYOUTS, assert_within, import_torch, in_layout, shapes

from sigdnn.plan_builders.reference.math import reduced_axes, reduction
from sigdnn.plan_builders.reference.math.reduction import FLOAT_MODES, INTEGER_MODES

torch = import_torch()


def torch_reduce(x: np.ndarray, mode: str, axes: tuple[int, ...]) -> np.ndarray:
    t = torch.tensor(x)
    if not axes:  # each element is its own reduction
        single = {"amax": np.abs(x), "norm1": np.abs(x), "norm2": np.abs(x), "mul_no_zeros": np.where(x == 0, 1.0, x)}
        return single.get(mode, x.copy())
    dims = list(axes)
    if mode == "add":
        return t.sum(dims, keepdim=True).numpy()
    if mode == "mul":
        out = t
        for a in dims:
            out = out.prod(a, keepdim=True)
        return out.numpy()
    if mode == "min":
        return t.amin(dims, keepdim=True).numpy()
    if mode == "max":
        return t.amax(dims, keepdim=True).numpy()
    if mode == "amax":
        return t.abs().amax(dims, keepdim=True).numpy()
    if mode == "avg":
        return t.mean(dims, keepdim=True).numpy()
    if mode == "norm1":
        return torch.linalg.vector_norm(t, 1, dims, keepdim=True).numpy()
    if mode == "norm2":
        return torch.linalg.vector_norm(t, 2, dims, keepdim=True).numpy()
    nz = torch.where(t == 0, torch.ones_like(t), t)  # mul_no_zeros
    return torch_reduce(nz.numpy(), "mul", axes)


def loop_reduce(x: np.ndarray, mode: str, out_dims: tuple[int, ...]):
    """Each output from its elements one at a time: fsum for sums, Python ints for integers."""
    axes = [i for i, (o, d) in enumerate(zip(out_dims, x.shape)) if o == 1 and d != 1]
    out = np.zeros(out_dims, dtype=x.dtype)
    for idx in itertools.product(*(range(d) for d in out_dims)):
        ranges = [range(x.shape[i]) if i in axes else [idx[i]] for i in range(x.ndim)]
        vals = [x[j].item() for j in itertools.product(*ranges)]
        integer = x.dtype.kind == "i"
        if mode == "add":
            v = sum(vals) if integer else math.fsum(vals)
        elif mode == "mul":
            v = math.prod(vals)
        elif mode == "min":
            v = min(vals)
        elif mode == "max":
            v = max(vals)
        elif mode == "amax":
            v = max(abs(a) for a in vals)
        elif mode == "avg":
            v = math.fsum(vals) / len(vals)
        elif mode == "norm1":
            v = sum(abs(a) for a in vals) if integer else math.fsum(abs(a) for a in vals)
        elif mode == "norm2":
            v = math.sqrt(math.fsum(a * a for a in vals))
        else:
            v = math.prod(a for a in vals if a != 0)
        out[idx] = v
    return out


def bound(x: np.ndarray, mode: str, axes: tuple[int, ...], want: np.ndarray) -> tuple[float, np.ndarray]:
    """(k, S) for |got - want| <= k * EPS * S, as the module docstring says."""
    n = max(1, math.prod(x.shape[a] for a in axes))
    if mode in ("add", "avg", "norm1"):
        s = np.sum(np.abs(x), axis=axes, keepdims=True) / (n if mode == "avg" else 1)
        return n + 2, s
    if mode == "norm2":
        return n / 2 + 4, np.abs(want)
    if mode in ("mul", "mul_no_zeros"):
        return 2 * n + 2, np.abs(want)
    return 0, np.abs(want)  # min / max / amax: exact


CASES = [
    ((3, 4, 5), (3, 1, 1)),
    ((3, 4, 5), (1, 4, 1)),
    ((3, 4, 5), (1, 1, 1)),
    ((2, 1, 7), (1, 1, 7)),
    ((6,), (1,)),
    ((2, 3), (2, 3)),
]


@pytest.mark.parametrize("layout", ["contiguous", "reversed", "permuted"])
@pytest.mark.parametrize("mode", FLOAT_MODES)
@pytest.mark.parametrize(("shape", "out"), CASES, ids=str)
def test_float_modes_match_torch_and_loops(shape, out, mode: str, layout: str) -> None:
    rng = np.random.default_rng(len(shape) + sum(out))
    x = rng.standard_normal(shape)
    x.flat[::4] = 0.0  # zeros for mul_no_zeros
    got = reduction(in_layout(x, layout, 1), mode, out)
    axes = reduced_axes(shape, out)
    assert got.shape == out and got.dtype == np.float64
    t = torch_reduce(x, mode, axes)
    k, s = bound(x, mode, axes, t)
    assert_within(got, t, s, 2 * k, f"{mode} vs torch")
    lp = loop_reduce(x, mode, out)
    assert_within(got, lp, s, k, f"{mode} vs loops")


@pytest.mark.parametrize("mode", INTEGER_MODES)
@pytest.mark.parametrize(("shape", "out"), CASES, ids=str)
def test_integer_modes_are_exact(shape, out, mode: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.integers(-2, 3, size=shape) if "mul" in mode else rng.integers(-9, 10, size=shape)
    x.flat[::3] = 0  # products of up to 60 factors of |x| <= 2 fit in int64
    got = reduction(x, mode, out)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, loop_reduce(x, mode, out))


def test_integer_sum_is_exact_beyond_float64() -> None:
    """2^53 + 1 is not a float64: the int64 path must not go through floats."""
    x = np.array([2**53, 1, 1], dtype=np.int64)
    assert reduction(x, "add", (1,)).item() == 2**53 + 2
    assert reduction(np.array([2**31, 2**31 - 1], dtype=np.int64), "mul", (1,)).item() == 2**62 - 2**31


def test_hand_worked() -> None:
    x = np.array([[3.0, -4.0, 0.0], [0.0, 0.0, 0.0]])
    r = {m: reduction(x, m, (2, 1)).ravel().tolist() for m in FLOAT_MODES}
    assert r == {
        "add": [-1.0, 0.0],
        "mul": [-0.0, 0.0],
        "min": [-4.0, 0.0],
        "max": [3.0, 0.0],
        "amax": [4.0, 0.0],
        "avg": [-1 / 3, 0.0],
        "norm1": [7.0, 0.0],
        "norm2": [5.0, 0.0],
        "mul_no_zeros": [-12.0, 1.0],  # all zeros: the empty product
    }


def test_empty_reductions() -> None:
    x = np.zeros((2, 0, 3))
    want = {
        "add": 0.0,
        "mul": 1.0,
        "min": np.inf,
        "max": -np.inf,
        "amax": 0.0,
        "norm1": 0.0,
        "norm2": 0.0,
        "mul_no_zeros": 1.0,
    }
    for mode, value in want.items():
        got = reduction(x, mode, (2, 1, 3))
        assert got.shape == (2, 1, 3) and (got == value).all(), mode
    assert np.isnan(reduction(x, "avg", (2, 1, 3))).all()
    xi = np.zeros((0, 2), dtype=np.int64)
    assert (reduction(xi, "min", (1, 2)) == np.iinfo(np.int64).max).all()
    assert (reduction(xi, "max", (1, 2)) == np.iinfo(np.int64).min).all()


def test_nan_propagates_like_torch() -> None:
    x = np.array([[1.0, np.nan, -3.0], [2.0, 5.0, -7.0]])
    for mode in FLOAT_MODES:
        got = reduction(x, mode, (2, 1))
        want = torch_reduce(x, mode, (1,))
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=mode)
        assert np.isnan(got[0, 0]), mode


def test_norm2_neither_overflows_nor_underflows() -> None:
    for v in (1e300, 1e-300, 3e-320):
        x = np.array([[v, v, v, v]])
        got = reduction(x, "norm2", (1, 1)).item()
        assert_within(np.array(got), np.array(2 * v), 2 * v, 4, f"norm2 of 4 x {v}")
    x = np.array([1e200, 1.0, np.inf])
    assert reduction(x, "norm2", (1,)).item() == np.inf


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="not a reduction"):
        reduction(np.zeros((2, 3)), "add", (2, 2))
    with pytest.raises(ValueError, match="not a reduction"):
        reduction(np.zeros((2, 3)), "add", (2,))
    with pytest.raises(ValueError, match="not defined for int64"):
        reduction(np.zeros((2, 3), dtype=np.int64), "avg", (2, 1))
    with pytest.raises(ValueError, match="'median' is not defined for float64"):
        reduction(np.zeros((2, 3)), "median", (2, 1))


@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_the_input_is_read_in_place(dtype: type) -> None:
    """x already float64 / int64 is reduced where it is: the peak allocation stays far below a copy of it."""
    import tracemalloc

    x = np.ones((1024, 1024), dtype)  # 8 MiB
    tracemalloc.start()
    try:
        y = reduction(x, "add", (1, 1024))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert y.ravel().tolist() == [1024] * 1024
    assert peak < x.nbytes // 8, peak


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=shapes([1, 2, 3, 4]),
    data=st.data(),
    mode=st.sampled_from(FLOAT_MODES),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**31),
)
def test_generated(shape, data, mode: str, layout: str, seed: int) -> None:
    out = tuple(data.draw(st.sampled_from([1, d])) for d in shape)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    got = reduction(in_layout(x, layout, seed), mode, out)
    axes = reduced_axes(shape, out)
    want = loop_reduce(x, mode, out)
    k, s = bound(x, mode, axes, want)
    assert_within(got, want, s, k, mode)
    xi = rng.integers(-1, 2, size=shape) if "mul" in mode else rng.integers(-5, 6, size=shape)
    if mode in INTEGER_MODES:
        np.testing.assert_array_equal(reduction(xi, mode, out), loop_reduce(xi, mode, out))
