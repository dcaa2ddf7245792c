"""The math's narrow path (float16 / float32 inputs widened block by block, results rounded into a Sink)
gives the bits of the float64 path (inputs widened whole, float64 result rounded once at the end).

Both paths compute the same float64 values in the same order; only where the
widening and the rounding happen moves. A difference in any bit means a block
read a narrow value without widening it, or a result was rounded twice.
"""

from __future__ import annotations

import numpy as np
import pytest

from sigdnn.plan_builders.reference import math
from sigdnn.plan_builders.reference.math.sink import Sink


def _store(out: np.ndarray, values: np.ndarray) -> None:
    np.copyto(out, values, casting="unsafe")


def _sink(shape: tuple[int, ...], dtype: type, channels_last: bool = False, casts: bool = False) -> Sink:
    """casts: the math may fuse its last float64 step with the rounding (NumPy's output cast)."""
    if channels_last:
        stored = np.full((shape[0], *shape[2:], shape[1]), np.nan, dtype)
        return Sink(np.moveaxis(stored, -1, 1), _store, casts)
    return Sink(np.full(shape, np.nan, dtype), _store, casts)


def _x(shape: tuple[int, ...], dtype: type, channels_last: bool = False, seed: int = 0) -> np.ndarray:
    a = (np.random.default_rng(seed).standard_normal(shape) * 3).astype(dtype)
    if channels_last:
        return np.ascontiguousarray(np.moveaxis(a, 1, -1)).transpose(0, a.ndim - 1, *range(1, a.ndim - 1))
    return a


def _same(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize(("shape", "axes"), [((300, 700), (1,)), ((40, 30, 50), (0, 2)), ((500, 200, 3), (0, 2))])
@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("casts", [False, True])
def test_softmax(dtype: type, shape: tuple[int, ...], axes: tuple[int, ...], log: bool, casts: bool) -> None:
    x = _x(shape, dtype)
    want_y, want_stats = math.softmax(x.astype(np.float64), axes, log)
    sink = _sink(shape, dtype, casts=casts)
    got_y, got_stats = math.softmax(x, axes, log, sink)
    assert got_y is None
    _same(sink.array, want_y.astype(dtype))
    _same(got_stats, want_stats)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("casts", [False, True])
def test_norms(dtype: type, channels_last: bool, casts: bool) -> None:
    shape = (4, 24, 30, 31)
    x = _x(shape, dtype, channels_last)
    p = _x((1, 24, 1, 1), dtype, seed=1)
    wide = x.astype(np.float64)
    want = math.batchnorm_train(wide, p, p, 1e-5, p, np.abs(p), 0.1)
    sink = _sink(shape, dtype, channels_last, casts)
    got = math.batchnorm_train(x, p, p, 1e-5, p, np.abs(p), 0.1, sink)
    assert got[0] is None
    _same(sink.array, want[0].astype(dtype))
    for g, w in zip(got[1:], want[1:]):
        _same(g, w)
    s = _x((1, 1, 30, 31), dtype, seed=2)
    for fn, args in ((math.layernorm, (s, s, 1e-5, True)), (math.rmsnorm, (s, None, 1e-5, True))):
        want = fn(wide, *args)
        sink = _sink(shape, dtype, channels_last, casts)
        got = fn(x, *args, sink)
        assert got[0] is None
        _same(sink.array, want[0].astype(dtype))
        for g, w in zip(got[1:], want[1:]):
            _same(g, w)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    ("kernel", "stride", "pad", "groups"), [(1, 1, 0, 1), (3, 1, 1, 1), (3, 2, 1, 2), (1, 2, 0, 1)]
)
def test_convolutions(dtype: type, channels_last: bool, kernel: int, stride: int, pad: int, groups: int) -> None:
    n, c, k, h = 3, 8, 12, 20
    x = _x((n, c, h, h), dtype, channels_last)
    w = _x((k, c // groups, kernel, kernel), dtype, channels_last, seed=1)
    o = (h + 2 * pad - kernel) // stride + 1
    dy = _x((n, k, o, o), dtype, channels_last, seed=2)
    geometry = ((pad, pad), (pad, pad), (stride, stride), (1, 1))
    want = math.conv_forward(x.astype(np.float64), w.astype(np.float64), *geometry)
    sink = _sink((n, k, o, o), dtype, channels_last)
    assert math.conv_forward(x, w, *geometry, sink) is None
    _same(sink.array, want.astype(dtype))

    want = math.conv_dgrad(dy.astype(np.float64), w.astype(np.float64), *geometry, x.shape)
    sink = _sink(x.shape, dtype, channels_last)
    assert math.conv_dgrad(dy, w, *geometry, x.shape, sink) is None
    _same(sink.array, want.astype(dtype))

    want = math.conv_wgrad(x.astype(np.float64), dy.astype(np.float64), *geometry, w.shape)
    _same(math.conv_wgrad(x, dy, *geometry, w.shape), want)


@pytest.mark.parametrize("x_last", [False, True])
def test_a_sink_in_another_layout_takes_the_whole_float64_result(x_last: bool) -> None:
    """y laid out unlike x does not regroup as a view of x's blocks: the math computes the float64 result
    whole and stores it once (same bits)."""
    shape = (3, 16, 9, 70)
    x = _x(shape, np.float32, x_last)
    want_y, want_stats = math.softmax(x.astype(np.float64), (1,))
    sink = _sink(shape, np.float32, channels_last=not x_last, casts=True)
    got_y, got_stats = math.softmax(x, (1,), False, sink)
    assert got_y is None
    _same(sink.array, want_y.astype(np.float32))
    _same(got_stats, want_stats)
    s = _x((1, 16, 1, 1), np.float32, seed=1)
    want = math.batchnorm_train(x.astype(np.float64), s, s, 1e-5)
    sink = _sink(shape, np.float32, channels_last=not x_last)
    got = math.batchnorm_train(x, s, s, 1e-5, y=sink)
    _same(sink.array, want[0].astype(np.float32))
    _same(got[2], want[2])


def _store_toward_zero(out: np.ndarray, values: np.ndarray) -> None:
    """float64 -> float32 rounded toward zero: a store NumPy's own cast cannot stand in for."""
    v = values.astype(np.float32)
    over = np.abs(v.astype(np.float64)) > np.abs(values)
    v[over] = np.nextafter(v[over], np.float32(0))
    np.copyto(out, v)


def test_a_sink_uses_its_store_unless_it_says_the_store_is_numpys_cast() -> None:
    """Sink(array, store) without ``casts``: every value goes through store (a ufunc writing into the array
    would round to nearest instead), so the result is the float64 softmax rounded toward zero, bit for bit."""
    x = _x((64, 50), np.float32)
    want, _ = math.softmax(x.astype(np.float64), (1,))
    toward_zero = np.empty(want.shape, np.float32)
    _store_toward_zero(toward_zero, want)
    assert np.any(toward_zero != want.astype(np.float32))  # the two roundings differ on this input
    sink = Sink(np.full(want.shape, np.nan, np.float32), _store_toward_zero)
    assert math.softmax(x, (1,), False, sink)[0] is None
    _same(sink.array, toward_zero)
