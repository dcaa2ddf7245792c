"""erf and erfc in float64 on the GPU reference, from their textbook series (cuTile has no float64 erf).

Written to be checked by eye, and independent of the CPU reference's fitted
erf (``plan_builders/reference/error_function.py``):

* z < 1: erf(z) = 2/sqrt(pi) e^(-z^2) sum_n (2 z^2)^n z / (1 * 3 * ... * (2n + 1)),
  every term positive (no cancellation); 40 terms reach float64 at z = 1, and
  erfc(z) = 1 - erf(z) loses at most a factor 1 / erfc(1) = 6.4 there.
* z >= 1: erfc(z) = e^(-z^2) / (sqrt(pi) K(z)) with Laplace's continued fraction
  K(z) = z + (1/2) / (z + (2/2) / (z + (3/2) / ...)), 200 levels evaluated from
  the bottom up (converged to float64 from z = 1 on).
* e^(-z^2) takes z^2 beyond float64: z^2 = p + e with e exact from a 26-bit
  split of z, and e^(-p - e) = e^(-p) (1 - e). Past z = 26 (erfc subnormal)
  the product is formed at e^354 times its size and scaled down last, so only
  the final multiplication rounds into the subnormals.

Checked against mpmath on the CPU emulator (tests/plan_builders/gpu_reference/
test_gpu_reference_erf.py): erf within 16 float64 ulps; gelu within 16 ulps
plus 3 z^2 for z = x / sqrt2 (its own rounding's effect on erfc(z)), ample
for the single rounding to a float32 or narrower output.
Every step is one whole-array operation of ``arrays.Array``.
"""

from __future__ import annotations

import math

from sigdnn.plan_builders.gpu_reference.arrays import Array, maximum, minimum, where

SERIES_TERMS = 40
FRACTION_LEVELS = 200
SERIES_BELOW = 1.0
SUBNORMAL_FROM = 26.0
UNDERFLOW_FROM = 28.0  # erfc(28) = 6.4e-343: 0 in float64
_SHIFT = 354.0  # e^-354 ~ 1.3e-154, a normal number; e^354 finite
_SPLIT = 134217729.0  # 2^27 + 1: Dekker's split into 26-bit halves
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)
_SQRT_PI = math.sqrt(math.pi)


def exp_neg_square(z: Array, shift: Array | float = 0.0, half: bool = False) -> Array:
    """e^(shift - z^2) (e^(shift - z^2 / 2) if ``half``) for finite z, z^2 carried beyond float64.

    Dekker: z^2 = p + e exactly, p = fl(z^2); halving both is exact."""
    c = z * _SPLIT
    high = c - (c - z)
    low = z - high
    p = z * z
    e = ((high * high - p) + high * low * 2.0) + low * low
    if half:
        p, e = p * 0.5, e * 0.5
    return (-(p - shift)).apply("EXP") * (1.0 - e)


def _erf_series(z: Array) -> Array:
    """erf(z) for 0 <= z <= 1 (the positive series)."""
    two_z2 = z * z * 2.0
    term = z
    total = z
    for n in range(1, SERIES_TERMS):
        term = term * two_z2 / (2 * n + 1)
        total = total + term
    return exp_neg_square(z) * total * _TWO_OVER_SQRT_PI


def _erfc_fraction(z: Array) -> Array:
    """erfc(z) for 1 <= z <= 28 (the continued fraction), subnormal results rounded once."""
    k = z
    for n in range(FRACTION_LEVELS, 0, -1):
        k = z + (n / 2) / k
    deep = z > SUBNORMAL_FROM
    shift, unshift = where(deep, _SHIFT, 0.0), where(deep, math.exp(-_SHIFT), 1.0)
    return exp_neg_square(z, shift) / (k * _SQRT_PI) * unshift


def _series_and_fraction(a: Array) -> tuple[Array, Array]:
    """(erf by the series, erfc by the fraction) of a >= 0, each on a clipped to its own range."""
    return _erf_series(minimum(a, SERIES_BELOW)), _erfc_fraction(minimum(maximum(a, SERIES_BELOW), UNDERFLOW_FROM))


def erfc_nonnegative(a: Array) -> Array:
    """erfc(a) for a >= 0 or NaN (inf gives 0)."""
    near, far = _series_and_fraction(a)
    value = where(a < SERIES_BELOW, 1.0 - near, where(a < UNDERFLOW_FROM, far, 0.0))
    return where(a != a, a, value)  # NaN stays NaN (the comparisons above are false for it)


def erf(x: Array) -> Array:
    """erf(x): odd (erf(-0) = -0); erf(+-inf) = +-1, NaN stays NaN."""
    a = x.apply("ABS")
    near, far = _series_and_fraction(a)
    value = where(a < SERIES_BELOW, near, where(a < UNDERFLOW_FROM, 1.0 - far, 1.0))
    signed = where(a == 0.0, x, where(x < 0.0, -value, value))  # +-0 is its own erf, sign included
    return where(x != x, x, signed)


def erfc(x: Array) -> Array:
    """erfc(x) for any x: 2 - erfc(-x) for x < 0 (at least 1 there: no cancellation)."""
    tail = erfc_nonnegative(x.apply("ABS"))
    return where(x < 0.0, 2.0 - tail, tail)
