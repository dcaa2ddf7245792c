"""The agreement metric (gpu_reference/agreement.py) on hand-worked values: ulps counted by the bit patterns'
distance (signs, zero, subnormals), NaN rules, integers, and float64 compared after rounding to float32."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from sigdnn.errors import UsageError
from sigdnn.plan_builders.gpu_reference.agreement import agreement_ulps, ulps


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.float32, np.float64], ids=str)
def test_neighbours_and_steps_across_zero(dtype) -> None:
    one = np.array([1.0], dtype)
    tiny = np.array([np.finfo(dtype).smallest_subnormal], dtype)
    up = np.nextafter(one.astype(np.float64), 2).astype(dtype) if dtype is np.float64 else None
    if up is None:  # one ulp above 1 in the narrow dtype, by its bits
        up = (one.view(np.dtype(f"u{one.itemsize}")) + 1).view(dtype)
    assert ulps(up, one).tolist() == [1] and ulps(one, up).tolist() == [1]
    assert ulps(-up, -one).tolist() == [1]
    # -tiny, -0 / +0, +tiny: two steps from the negative to the positive subnormal; the zeros are one value
    assert ulps(-tiny, tiny).tolist() == [2] and ulps(tiny, -tiny).tolist() == [2]
    assert ulps(np.array([-0.0], dtype), np.array([0.0], dtype)).tolist() == [0]
    assert ulps(-tiny, np.array([0.0], dtype)).tolist() == [1]
    # -1 to +1: every pattern of [0, 1] on either side, counted once each
    bits = int(one.view(np.dtype(f"u{one.itemsize}"))[0])
    assert ulps(-one, one).tolist() == [2 * bits]


@pytest.mark.parametrize(
    ("dtype", "far"), [(np.float16, 2**16), (ml_dtypes.bfloat16, 2**16), (np.float32, 2**32), (np.float64, 2**62)]
)
def test_nan_against_nan_is_0_and_against_a_number_the_whole_range(dtype, far: int) -> None:
    # -1 against 1 rather than -inf against inf: float64's count of that would pass 2^63
    got = np.array([np.nan, np.nan, 1.0, np.inf, -1.0], dtype)
    want = np.array([np.nan, 1.0, np.nan, np.inf, 1.0], dtype)
    found = ulps(got, want)
    assert found.dtype == np.int64
    bits = int(np.array([1.0], dtype).view(np.dtype(f"u{got.itemsize}"))[0])
    assert found.tolist() == [0, far, far, 0, 2 * bits]


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int32, np.int64, np.bool_], ids=str)
def test_integers_and_bool_count_the_difference(dtype) -> None:
    if dtype is np.bool_:
        got, want, diff = np.array([True, False, True]), np.array([False, True, True]), [1, 1, 0]
    else:
        info = np.iinfo(dtype)
        got = np.array([info.max, 5, 3], dtype)
        want = np.array([info.min, 7, 3], dtype)
        diff = [int(info.max) - int(info.min), 2, 0]
    if dtype is np.int64:  # max - min wraps in int64; pick values whose difference fits
        got, want, diff = np.array([2**62, 5, 3], dtype), np.array([-(2**61), 7, 3], dtype), [2**62 + 2**61, 2, 0]
    assert ulps(got, want).tolist() == diff
    assert ulps(want, got).tolist() == diff


def test_mismatched_dtypes_or_shapes_are_refused() -> None:
    with pytest.raises(UsageError, match=r"ulps of float32\[2\] against float64\[2\]"):
        ulps(np.zeros(2, np.float32), np.zeros(2, np.float64))
    with pytest.raises(UsageError, match=r"ulps of float32\[2\] against float32\[3\]"):
        ulps(np.zeros(2, np.float32), np.zeros(3, np.float32))
    with pytest.raises(UsageError, match=r"ulps of float32\[2, 1\] against float32\[1, 2\]"):
        ulps(np.zeros((2, 1), np.float32), np.zeros((1, 2), np.float32))


def test_agreement_rounds_float64_to_float32_and_leaves_other_dtypes() -> None:
    a = np.array([1.0, 2.0**200, np.nan, -3.0])
    # 1 float64 ulp (0 after rounding), 2^200 against inf in float32 (both overflow: equal), NaN, one float32 ulp
    b = np.array([1.0 + 2.0**-52, 2.0**201, np.nan, -3.0 - 2.0**-22])
    assert agreement_ulps(a, b).tolist() == [0, 0, 0, 1]
    assert ulps(a, b)[0] == 1  # in float64 itself they differ
    half = np.array([1.0, 2.0], np.float16)
    assert agreement_ulps(half, half + np.float16(2.0**-10)).tolist() == [1, 0]  # 2 + 2^-10 rounds back to 2
    assert agreement_ulps(np.array([3], np.int32), np.array([-4], np.int32)).tolist() == [7]


def test_float64_distances_past_int64_saturate_at_the_whole_range() -> None:
    """-inf against +inf (and the largest finite values of opposite signs) lie about 2^64 apart in float64's
    ordering: past int64, so the count saturates at int64's largest instead of wrapping; near values stay exact."""
    top = np.finfo(np.float64).max
    got = np.array([-np.inf, -top, top, np.nextafter(top, 0), -top, 1.0])
    want = np.array([np.inf, top, -top, top, -np.nextafter(top, 0), np.nextafter(1.0, 2)])
    assert ulps(got, want).tolist() == [2**63 - 1, 2**63 - 1, 2**63 - 1, 1, 1, 1]
