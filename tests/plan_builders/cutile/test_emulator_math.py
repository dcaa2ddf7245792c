"""The emulator's float math against cuTile's documented semantics and exact float64 oracles: transcendentals
correctly rounded from float64 (NumPy's own float32 ones are not), integer inputs refused, NaN-skipping
maximum / minimum, exp2's flush of float32 subnormal results."""

from __future__ import annotations

import numpy as np
import pytest

from sigdnn.plan_builders.cutile import emulator_math as ct


def test_float32_transcendentals_are_float64_rounded_once() -> None:
    x = np.random.default_rng(0).uniform(-80, 80, 200_000).astype(np.float32)
    np.testing.assert_array_equal(ct.exp(x), np.exp(x.astype(np.float64)).astype(np.float32))
    assert ct.exp(np.float64(1.0)) == np.exp(1.0)  # float64 stays float64
    np.testing.assert_array_equal(ct.rsqrt(np.array([4.0, 0.25], np.float32)), [0.5, 2.0])


@pytest.mark.parametrize("fn", [ct.exp, ct.log, ct.sqrt, ct.floor, ct.isnan])
def test_float_math_refuses_integer_inputs(fn) -> None:
    with pytest.raises(TypeError, match="integer inputs are not supported"):
        fn(np.arange(3, dtype=np.int32))


def test_abs_takes_integers_and_pow_refuses_them() -> None:
    np.testing.assert_array_equal(ct.abs(np.array([-2, 3], np.int32)), [2, 3])
    with pytest.raises(TypeError, match="pow: integer inputs"):
        ct.pow(np.int32(2), np.int32(3))
    assert ct.pow(np.float32(2.0), np.float32(3.0)) == 8.0


def test_maximum_and_minimum_skip_a_nan_unless_asked_to_propagate_it() -> None:
    nan, one = np.float32(np.nan), np.float32(1.0)
    assert ct.maximum(nan, one) == 1.0 and ct.minimum(one, nan) == 1.0
    assert np.isnan(ct.maximum(nan, one, propagate_nan=True)) and np.isnan(ct.minimum(one, nan, propagate_nan=True))


def test_exp2_flushes_float32_subnormal_results_only_when_asked() -> None:
    tiny = np.finfo(np.float32).tiny
    assert ct.exp2(np.float32(-127.0)) == np.float32(2.0**-127)  # subnormal, kept
    assert ct.exp2(np.float32(-127.0), flush_to_zero=True) == 0.0
    assert ct.exp2(np.float32(-126.0), flush_to_zero=True) == tiny  # the smallest normal stays
    assert ct.exp2(np.float64(-1030.0), flush_to_zero=True) == 2.0**-1030  # float64 is not flushed
