"""Independent rounding and ulp oracles for the pointwise and dtype tests.

Nothing here calls sigdnn: the point is to check its rounding. Two oracles:

* ``round_fraction``: rounds an exact rational (``fractions.Fraction``) to a
  format from first principles (precision, smallest normal exponent, largest
  finite value). Slow, obviously right; the reference for ``round_exact``
  and for ``sigdnn.dtypes.round_to`` in tests/test_dtypes.py.
* ``round_exact``: the vectorized float64 -> float32 / float16 / bfloat16
  rounding the pointwise tests apply to torch's float64 results. torch (and
  ml_dtypes) go float64 -> float32 -> bfloat16, which double-rounds; here a
  cheap guess only brackets x between two adjacent representable numbers,
  and x is compared with their midpoint, which float64 holds exactly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from fractions import Fraction

import attrs
import ml_dtypes
import numpy as np

# name -> (storage dtype, same-width unsigned dtype)
FORMATS: dict[str, tuple[np.dtype, np.dtype]] = {
    "float32": (np.dtype(np.float32), np.dtype(np.uint32)),
    "float16": (np.dtype(np.float16), np.dtype(np.uint16)),
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), np.dtype(np.uint16)),
    "fp8_e4m3": (np.dtype(ml_dtypes.float8_e4m3fn), np.dtype(np.uint8)),
    "fp8_e5m2": (np.dtype(ml_dtypes.float8_e5m2), np.dtype(np.uint8)),
}


@attrs.frozen
class Format:
    """A binary floating-point format, described the way IEEE 754 does."""

    precision: int  # significand bits, the implicit one included
    emin: int  # exponent of the smallest normal number
    max_finite: Fraction
    overflow: str  # what a rounded magnitude above max_finite becomes: "inf" or "nan"


SPEC: dict[str, Format] = {
    "float32": Format(24, -126, Fraction(2**24 - 1) * Fraction(2) ** (127 - 23), "inf"),
    "float16": Format(11, -14, Fraction(65504), "inf"),
    "bfloat16": Format(8, -126, Fraction(2**8 - 1) * Fraction(2) ** (127 - 7), "inf"),
    # e4m3fn has no infinity; its one NaN pattern per sign sits where 480 would be.
    # ml_dtypes rounds as if 480 existed and turns it into NaN (see tests/test_dtypes.py).
    "fp8_e4m3": Format(4, -6, Fraction(448), "nan"),
    "fp8_e5m2": Format(3, -14, Fraction(57344), "inf"),
}


def floor_log2(q: Fraction) -> int:
    """The e with 2**e <= q < 2**(e+1), for q > 0, exactly."""
    e = q.numerator.bit_length() - q.denominator.bit_length()
    if Fraction(2) ** e > q:
        e -= 1
    return e


def round_fraction(q: Fraction, fmt: Format, negative_zero: bool = False) -> float:
    """Round the exact value ``q`` to ``fmt`` (nearest, ties to even), as a Python float.

    Rounding happens as if the exponent range were unbounded above, then a
    result beyond the largest finite value overflows, as IEEE 754 says.
    Every value of these formats is a float64, so the float return is exact.
    """
    if q == 0:
        return -0.0 if negative_zero else 0.0
    a = abs(q)
    e = max(floor_log2(a), fmt.emin)
    ulp = Fraction(2) ** (e - fmt.precision + 1)
    n, rest = divmod(a, ulp)
    half = ulp / 2
    if rest > half or (rest == half and n % 2 == 1):
        n += 1
    value = n * ulp
    overflow = math.inf if fmt.overflow == "inf" else math.nan
    result = overflow if value > fmt.max_finite else float(value)
    return -result if q < 0 else result


def round_fraction_like(x: float, dtype: str) -> float:
    """``round_fraction`` for a float64 input, with its sign of zero, inf and NaN."""
    if math.isnan(x):
        return math.nan
    if math.isinf(x):
        return math.copysign(math.inf, x) if SPEC[dtype].overflow == "inf" else math.nan
    return round_fraction(Fraction(x), SPEC[dtype], negative_zero=math.copysign(1.0, x) < 0)


def _bits(dtype: str) -> tuple[np.dtype, np.dtype, int]:
    target, uint = FORMATS[dtype]
    return target, uint, 1 << (8 * target.itemsize - 1)


def round_exact(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 ``x`` to ``dtype`` once: nearest, ties to even, overflow to inf.

    For float32 / float16 / bfloat16. Works on |x| and puts the sign back,
    so -0.0 stays -0.0 and the positive bit patterns are monotone.
    """
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ValueError(f"round_exact handles float32/float16/bfloat16, not {dtype}")
    target, uint, sign = _bits(dtype)
    x = np.asarray(x, dtype=np.float64)
    mag = np.abs(x)
    finite = np.isfinite(mag)
    safe = np.where(finite, mag, 0.0)
    with np.errstate(over="ignore"):
        guess = safe.astype(target)  # may be one unit off (double rounding) or inf
    lo = guess.view(uint).astype(np.int64)
    lo -= guess.astype(np.float64) > safe  # now lo <= |x|
    hi = lo + 1
    max_bits = int(np.array(ml_dtypes.finfo(target).max, dtype=target).view(uint))
    lo_val = lo.astype(uint).view(target).astype(np.float64)
    hi_val = hi.astype(uint).view(target).astype(np.float64)
    # Past the largest finite value the next number "would be" max + ulp(max).
    top = float(np.array(max_bits, dtype=uint).view(target))
    below = float(np.array(max_bits - 1, dtype=uint).view(target))
    hi_val = np.where(hi > max_bits, 2 * top - below, hi_val)
    beyond = (hi > max_bits) & (safe > hi_val)  # far past the top: infinity
    if not np.all(beyond | ((lo_val <= safe) & (safe <= hi_val))):
        raise AssertionError("round_exact: the guess did not bracket x")
    mid = (lo_val + hi_val) / 2  # exact: at most 26 significant bits
    bits = np.where(safe > mid, hi, np.where(safe < mid, lo, np.where(lo % 2 == 0, lo, hi)))
    bits = np.where(beyond, max_bits + 1, bits)
    inf_bits = int(np.array(np.inf, dtype=target).view(uint))
    nan_bits = int(np.array(np.nan, dtype=target).view(uint))
    bits = np.where(np.isnan(mag), nan_bits, np.where(np.isinf(mag), inf_bits, bits))
    bits = np.where(np.signbit(x), bits | sign, bits)
    return bits.astype(uint).view(target)


def ordered(values: np.ndarray, dtype: str) -> np.ndarray:
    """Bit patterns as integers that count representable steps (+0 and -0 are both 0)."""
    target, uint, sign = _bits(dtype)
    bits = np.ascontiguousarray(values, dtype=target).view(uint).astype(np.int64)
    mag = bits & (sign - 1)
    return np.where(bits & sign, -mag, mag)


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """How many representable steps of ``dtype`` lie between a and b."""
    return np.abs(ordered(a, dtype) - ordered(b, dtype))


def assert_ulp_close(
    actual: np.ndarray,
    expected: np.ndarray,
    dtype: str,
    max_ulp: int = 1,
    inputs: Mapping[str, np.ndarray] | None = None,
    what: str = "",
) -> None:
    """Finite values within ``max_ulp``; NaN and inf exactly where expected.

    The message shows the worst elements with the inputs that made them.
    """
    target = FORMATS[dtype][0]
    assert actual.dtype == target, f"{what}: dtype {actual.dtype}, expected {target}"
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape}, expected {expected.shape}"
    a64 = actual.astype(np.float64)
    e64 = expected.astype(np.float64)
    nan_a, nan_e = np.isnan(a64), np.isnan(e64)
    special = nan_a | nan_e | np.isinf(a64) | np.isinf(e64)
    bad_special = special & ~((nan_a & nan_e) | (a64 == e64))
    dist = np.where(special, 0, ulp_distance(np.where(special, 0, actual), np.where(special, 0, expected), dtype))
    bad = bad_special | (dist > max_ulp)
    if not bad.any():
        return
    score = np.where(bad_special, np.iinfo(np.int64).max, dist)
    worst = np.argsort(score, axis=None)[::-1][:8]
    lines = [f"{what}: {int(bad.sum())} of {bad.size} elements off by more than {max_ulp} ulp ({dtype})"]
    for flat in worst:
        idx = np.unravel_index(flat, bad.shape)
        if not bad[idx]:
            break
        ins = ""
        if inputs:
            ins = ", ".join(
                f"{k}={float(np.broadcast_to(v, bad.shape)[idx].astype(np.float64))!r}" for k, v in inputs.items()
            )
        ulps = "nan/inf mismatch" if bad_special[idx] else f"{int(dist[idx])} ulp"
        lines.append(f"  at {idx}: got {float(a64[idx])!r}, want {float(e64[idx])!r} ({ulps}); {ins}")
    raise AssertionError("\n".join(lines))
