"""Fit the float32 coefficient tables of ``_f32math.py`` (offline: ``python -m sigdnn.plan_builders.cutile._fit_f32math``).

The GPU kernels compute in float32 and must land within a few float32 ulps
of the float64 reference, also where the textbook formulas cancel. Every
table is fitted here to float64 values of the definitions (the reference's
own erf/erfc, good to ~2 float64 ulps: far below what float32 needs); no
published coefficients are used. Coefficients are rounded to float32 one at
a time, lowest order first, refitting the rest after each rounding, so that
the higher ones absorb the leading ones' rounding. The worst relative error
of each fit (float64 evaluation) goes to stderr; the output replaces the
``BEGIN/END GENERATED`` block of ``_f32math.py``.

Tables:
* ERF_R: erf(x) = x R(x^2) for |x| < ERF_SMALL.
* ERFC_P: erfc(a) = exp(-a^2) t P(t), t = 1 / (1 + ERFC_K a), a in [ERF_SMALL, 4].
* PHI_S: Phi(x) = 1/2 + x S(x^2) for |x| < PHI_SMALL (Phi: the normal CDF, gelu's).
* PHI_P: Phi(-a) = exp(-a^2/2) t P(t), t = 1 / (1 + PHI_K a), a in [PHI_SMALL, PHI_CLAMP].
* GELU_H / GELU_TANH_H: the gelu derivatives have a root x0 near -0.75 where their two
  terms cancel; there g(x) = (x - x0) H(x - centre) on [lo, hi], x0 split in two floats.
* FAST_*: the same shapes with fewer terms, for nodes whose result is stored in a 16- or
  8-bit float (relative error ~1e-5 where those need ~4e-4: one ulp of float16 is 2^-10
  relative, and a result within half of that rounds at most one ulp away): FAST_PHI_P on
  [0, PHI_CLAMP], FAST_*_H on x0 +- FAST_WINDOW.
* FAST_LOG1P: log1p(t) = t L(t) on [0, 1] (softplus of a 16- or 8-bit result, t = e^-|z|).
* FAST_LOG_P: log1p(f) = f P(f) on [sqrt(1/2) - 1, sqrt(2) - 1] (log of a 16- or 8-bit result).
* FAST_LOG2_P: log2(1 + f) = f P(f) on the same range, 8 terms (pow of a 16- or 8-bit result).
* FAST_ERF_Q: erf(a) = 1 - 2^(a Q(a)) on [FAST_ERF_TINY, 4] (below it erf is 2x/sqrt(pi)
  within (2^-6)^2/3 = 8e-5 relative): one exp2 and no reciprocal, no second table.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import numpy as np

from sigdnn.plan_builders.reference.error_function import erf, erfc
from sigdnn.plan_builders.reference.pointwise import _gelu_bwd, _gelu_tanh_bwd

ERF_SMALL = 0.875
PHI_SMALL = 0.5
PHI_CLAMP = 14.5
ERFC_K = 0.5
PHI_K = 0.3
WINDOW = (-2.0, -0.3)  # the gelu derivatives' root windows
FAST_WINDOW = 0.1
FAST_ERF_TINY = 2.0**-6


def _f32(v: float) -> float:
    return float(np.float32(v))


def fit_f32(x: np.ndarray, target: np.ndarray, deg: int) -> tuple[list[float], float]:
    """Polynomial in x (constant first), float32 coefficients, minimizing the relative error."""
    weight = 1.0 / np.abs(target)
    fixed: list[float] = []
    for k in range(deg + 1):
        rest = target - sum(c * x**i for i, c in enumerate(fixed))
        powers = np.stack([x**i for i in range(k, deg + 1)], axis=1)
        coef, *_ = np.linalg.lstsq(powers * weight[:, None], rest * weight, rcond=None)
        fixed.append(_f32(coef[0]))
    approx = sum(c * x**i for i, c in enumerate(fixed))
    return fixed, float(np.max(np.abs(approx - target) * weight))


def cheb(lo: float, hi: float, n: int = 3000) -> np.ndarray:
    k = np.arange(n)
    return (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / n)


def root(g: Callable[[np.ndarray], np.ndarray], lo: float, hi: float) -> float:
    a, b = lo, hi
    for _ in range(200):
        m = (a + b) / 2
        if np.sign(g(np.array([m]))[0]) == np.sign(g(np.array([a]))[0]):
            a = m
        else:
            b = m
    return (a + b) / 2


def fit_window(
    g: Callable[[np.ndarray], np.ndarray], deg: int, window: tuple[float, float] | None = None
) -> tuple[float, float, float, list[float], float]:
    x0 = root(g, -1.0, -0.5)
    x0_hi = _f32(x0)
    x0_lo = _f32(x0 - x0_hi)
    lo, hi = window or (x0_hi - FAST_WINDOW, x0_hi + FAST_WINDOW)
    centre = (lo + hi) / 2
    x = cheb(lo, hi)
    x = x[np.abs(x - x0) > 1e-4]  # H = g / (x - x0) is smooth; keep float64 cancellation out of the fit
    coef, err = fit_f32(x - centre, g(x) / (x - x0), deg)
    return x0_hi, x0_lo, centre, coef, err


def main() -> None:
    out: list[str] = []

    def table(name: str, values: list[float], err: float) -> None:
        print(f"{name}: worst relative error {err:.2e}", file=sys.stderr)
        out.append(f"{name} = ({', '.join(repr(v) for v in values)})")

    x = cheb(0.0, ERF_SMALL)
    x = x[x > 1e-6]
    table("ERF_R", *fit_f32(x * x, erf(x) / x, 8))
    a = cheb(ERF_SMALL, 4.0)
    t = 1 / (1 + ERFC_K * a)
    table("ERFC_P", *fit_f32(t, erfc(a) * np.exp(a * a) / t, 12))
    x = cheb(0.0, PHI_SMALL)
    x = x[x > 1e-6]
    table("PHI_S", *fit_f32(x * x, 0.5 * erf(x / math.sqrt(2)) / x, 7))
    a = cheb(PHI_SMALL, PHI_CLAMP)
    t = 1 / (1 + PHI_K * a)
    table("PHI_P", *fit_f32(t, 0.5 * erfc(a / math.sqrt(2)) * np.exp(a * a / 2) / t, 13))
    one = np.ones(1)
    for name, fn in (
        ("GELU", lambda x: _gelu_bwd(one, x)),
        ("GELU_TANH", lambda x: _gelu_tanh_bwd(one, x)),
    ):
        x0_hi, x0_lo, centre, coef, err = fit_window(fn, 16, WINDOW)
        out.append(f"{name}_X0 = ({x0_hi!r}, {x0_lo!r})")
        out.append(f"{name}_CENTRE = {centre!r}")
        table(f"{name}_H", coef, err)
        _, _, centre, coef, err = fit_window(fn, 4)
        out.append(f"FAST_{name}_CENTRE = {centre!r}")
        table(f"FAST_{name}_H", coef, err)
    a = cheb(0.0, PHI_CLAMP)
    t = 1 / (1 + PHI_K * a)
    table("FAST_PHI_P", *fit_f32(t, 0.5 * erfc(a / math.sqrt(2)) * np.exp(a * a / 2) / t, 5))
    t = cheb(0.0, 1.0)
    table("FAST_LOG1P", *fit_f32(t, np.log1p(t) / t, 5))
    f = cheb(math.sqrt(0.5) - 1, math.sqrt(2) - 1)
    f = f[np.abs(f) > 1e-7]
    table("FAST_LOG_P", *fit_f32(f, np.log1p(f) / f, 5))
    table("FAST_LOG2_P", *fit_f32(f, np.log2(1 + f) / f, 7))
    a = cheb(FAST_ERF_TINY / 2, 4.0)
    table("FAST_ERF_Q", *fit_f32(a, np.log2(erfc(a)) / a, 5))
    print("# BEGIN GENERATED by _fit_f32math.py (do not edit by hand)")
    for name, value in (
        ("ERF_SMALL", ERF_SMALL),
        ("PHI_SMALL", PHI_SMALL),
        ("PHI_CLAMP", PHI_CLAMP),
        ("ERFC_K", ERFC_K),
        ("PHI_K", PHI_K),
        ("WINDOW_LO", WINDOW[0]),
        ("WINDOW_HI", WINDOW[1]),
        ("FAST_WINDOW", FAST_WINDOW),
        ("FAST_ERF_TINY", FAST_ERF_TINY),
    ):
        print(f"{name} = {value!r}")
    print("\n".join(out))
    print("# END GENERATED")


if __name__ == "__main__":
    main()
