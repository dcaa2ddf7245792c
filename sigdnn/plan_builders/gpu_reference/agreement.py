"""How far the GPU reference's results are from the CPU reference's, in units of the output dtype.

The agreement tests and the agreement campaign (benchmarks/gpu_reference.py)
count with these: 0 is the same value, 1 the neighbouring representable
value. float64 outputs are compared after both round to float32: two float64
computations in different summation orders (or the GPU's libm against
NumPy's) differ in their last float64 bits, and what the agreement target
speaks of is a rounding to a narrower dtype changing.
"""

from __future__ import annotations

import numpy as np

from sigdnn.errors import UsageError


def _ordered(bits: np.ndarray, width: int) -> np.ndarray:
    """Float bit patterns mapped to integers in the order of the values they encode (-0 and +0 equal)."""
    signed = bits.astype(np.int64)
    sign = np.int64(1) << (width - 1)
    magnitude = signed & (sign - 1)
    return np.where(signed & sign, -magnitude, magnitude)


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element: how many representable values of the dtype lie between got and want (0: the same
    value; NaN against NaN is 0, NaN against a number is the dtype's whole range). Integers and bool:
    the difference."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        raise UsageError(
            f"ulps of {got.dtype}{list(got.shape)} against {want.dtype}{list(want.shape)}: they must match"
        )
    if got.dtype.kind in "biu":
        return np.abs(got.astype(np.int64) - want.astype(np.int64))
    width = got.dtype.itemsize * 8
    word = np.dtype(f"u{got.dtype.itemsize}")
    a, b = _ordered(got.view(word), width), _ordered(want.view(word), width)
    nan_a, nan_b = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
    far = np.int64(1) << min(width, 62)
    most = np.iinfo(np.int64).max  # float64's values of opposite signs can lie further apart: they saturate
    with np.errstate(over="ignore"):
        apart = np.where(((a < 0) != (b < 0)) & (np.abs(a) > most - np.abs(b)), most, np.abs(a - b))
    return np.where(nan_a & nan_b, 0, np.where(nan_a | nan_b, far, apart))


def agreement_ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """ulps() of the output dtype; float64 outputs are compared after both round to float32 (two float64
    computations in different summation orders differ in their last bits: docs/gpu_reference.md)."""
    if np.asarray(want).dtype == np.float64:
        with np.errstate(all="ignore"):
            return ulps(np.asarray(got).astype(np.float32), np.asarray(want).astype(np.float32))
    return ulps(got, want)
