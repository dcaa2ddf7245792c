"""Fit the coefficient tables of sigdnn/plan_builders/reference/error_function.py (offline; needs mpmath).

Run: python scripts/fit_erf.py > /tmp/tables.py (~40 s; the worst error of
every fit goes to stderr), then replace the block between the ``BEGIN/END
GENERATED`` markers in error_function.py with the output. Everything is fitted to the
definitions (mpmath's erf/erfc at 60 digits); no published coefficients are
used. The scheme (error_function.py's docstring says why):

* |x| < 27/32: erf(x) = x + (x/8 + x R(x^2)), R(u) = erf(sqrt u)/sqrt u - 9/8
  fitted on u in [0, (27/32)^2]. The 1/8 is split off so that R(0) ~ 0.0034
  rounds at ~2^-62, not at the ~2^-56 of rounding 2/sqrt(pi) - 1 itself.
* a = |x| < 28 in 63 intervals J: J = 0 is [0, 1/8), the others are eighth
  octaves from 1/8 up (the exponent and top three mantissa bits pick J).
  erfc(a) = exp(-a^2) F(a), F(a) = exp(a^2) erfc(a) ~ C0[J] + P_J(s),
  s = (a - M[J]) / (a + K[J]): M[J] is J's midpoint (a - M[J] is then exact
  for J > 0), K[J] a pole suiting F's 1/a-like decay (a small search picks
  the one with the smallest Chebyshev error), C0[J] is F(M[J]) cut to 26
  significant bits (so that exp(-a^2) C0[J] can be formed exactly from a
  26/27-bit split of the exponential), and P_J, of degree DEG with its
  constant term, carries the rest.

Every coefficient is a double. They are rounded one at a time, lowest order
first, refitting the others after each rounding (weighted least squares on
Chebyshev points, relative error), so that the higher ones absorb what they
can of the leading ones' rounding. Target: every fit within 2^-59 or so,
small against the float64 rounding that follows.
"""

from __future__ import annotations

import math
import sys

import mpmath as mp

mp.mp.dps = 60

DEG = 7  # degree of P_J, the same for every interval (the evaluator is one gathered Horner loop)
R_DEG = 11  # degree of R in u = x^2
ERF_SMALL = 27 / 32  # R covers |x| < ERF_SMALL
OCTAVE_BITS = 3  # intervals per octave = 2**OCTAVE_BITS
A_LO, A_HI = 0.125, 28.0  # J = 0 is [0, A_LO); a is clipped to 27.5 < A_HI (erfc(27.5) is 0 in float64)
K_CANDIDATES = [n / 16 for n in range(2, 65)]


def F(x: mp.mpf) -> mp.mpf:
    """exp(x^2) erfc(x): smooth and slowly varying on x >= 0 (1 at 0, ~1/(sqrt(pi) x) for large x)."""
    return mp.erfc(x) * mp.exp(x * x)


def R(u: mp.mpf) -> mp.mpf:
    """erf(sqrt u)/sqrt u - 9/8, with its limit 2/sqrt(pi) - 9/8 at u = 0."""
    if u == 0:
        return 2 / mp.sqrt(mp.pi) - mp.mpf(9) / 8
    r = mp.sqrt(u)
    return mp.erf(r) / r - mp.mpf(9) / 8


def cheb_points(lo: mp.mpf, hi: mp.mpf, n: int) -> list[mp.mpf]:
    return [(lo + hi) / 2 + (hi - lo) / 2 * mp.cos(mp.pi * (i + mp.mpf(1) / 2) / n) for i in range(n)]


def fit_rounded(target: list[mp.mpf], weight: list[mp.mpf], pts: list[mp.mpf], deg: int) -> list[float]:
    """Double coefficients c_0..c_deg of sum c_k s^k ~ target, minimizing sum (weight * error)^2.

    Rounds c_0 first, refits c_1..c_deg against what the rounded c_0 left,
    and so on up: the low-order coefficients matter most near s = 0 and the
    higher ones can absorb part of their rounding.
    """
    fixed: list[float] = []
    for j in range(deg + 1):
        a = mp.matrix(len(pts), deg + 1 - j)
        b = mp.matrix(len(pts), 1)
        for i, (s, t, w) in enumerate(zip(pts, target, weight)):
            b[i] = (t - sum(c * s**k for k, c in enumerate(fixed))) * w
            for k in range(j, deg + 1):
                a[i, k - j] = s**k * w
        sol, _ = mp.qr_solve(a, b)
        fixed.append(float(sol[0]))
    return fixed


def round_bits(v: mp.mpf, bits: int) -> float:
    """v rounded to a double with at most ``bits`` significant bits."""
    m, e = math.frexp(float(v))
    return math.ldexp(round(m * 2**bits), e - bits)


def interval(j: int) -> tuple[mp.mpf, mp.mpf, mp.mpf]:
    """Interval J = j: [lo, hi) and midpoint; [0, A_LO), then 2**OCTAVE_BITS per octave from A_LO up."""
    if j == 0:
        return mp.mpf(0), mp.mpf(A_LO), mp.mpf(A_LO) / 2
    per = 2**OCTAVE_BITS
    base = mp.mpf(A_LO) * 2 ** ((j - 1) // per)
    width = base / per
    lo = base + width * ((j - 1) % per)
    return lo, lo + width, lo + width / 2


def cheb_error(f, lo: mp.mpf, hi: mp.mpf, deg: int) -> mp.mpf:
    """Relative error of degree-deg Chebyshev interpolation of f on [lo, hi]: cheap, to pick K."""
    _, err = mp.chebyfit(f, [lo, hi], deg + 1, error=True)
    return err / min(abs(f(lo)), abs(f(hi)))


def fit_interval(j: int) -> tuple[float, float, float, list[float], mp.mpf]:
    lo, hi, m = interval(j)
    best = None
    for k in K_CANDIDATES:
        kk = mp.mpf(k)
        err = cheb_error(lambda s, kk=kk: F((m + kk * s) / (1 - s)), (lo - m) / (lo + kk), (hi - m) / (hi + kk), DEG)
        if best is None or err < best[0]:
            best = (err, k)
    k = best[1]
    kk = mp.mpf(k)
    c0 = round_bits(F(m), 26)
    sa, sb = (lo - m) / (lo + kk), (hi - m) / (hi + kk)
    pts = cheb_points(sa, sb, 6 * (DEG + 1))
    fv = [F((m + kk * s) / (1 - s)) for s in pts]
    coef = fit_rounded([v - c0 for v in fv], [1 / v for v in fv], pts, DEG)
    worst = max_rel_error(lambda s: c0 + mp.polyval(coef[::-1], s), lambda s: F((m + kk * s) / (1 - s)), sa, sb)
    return float(m), k, c0, coef, worst


def max_rel_error(approx, exact, lo: mp.mpf, hi: mp.mpf, n: int = 600) -> mp.mpf:
    worst = mp.mpf(0)
    for i in range(n + 1):
        s = lo + (hi - lo) * i / n
        v = exact(s)
        worst = max(worst, abs((approx(s) - v) / v))
    return worst


def fit_r() -> tuple[list[float], mp.mpf]:
    lo, hi = mp.mpf(0), mp.mpf(ERF_SMALL) ** 2
    pts = cheb_points(lo, hi, 6 * (R_DEG + 1))
    rv = [R(u) for u in pts]
    # erf = x (9/8 + R): an error dR is a relative error dR / (9/8 + R) of erf.
    coef = fit_rounded(rv, [1 / (mp.mpf(9) / 8 + r) for r in rv], pts, R_DEG)
    worst = max_rel_error(lambda u: mp.polyval(coef[::-1], u) + mp.mpf(9) / 8, lambda u: R(u) + mp.mpf(9) / 8, lo, hi)
    return coef, worst


def fmt(values: list[float]) -> str:
    return "[" + ", ".join(repr(v) for v in values) + "]"


def main() -> None:
    r_coef, r_err = fit_r()
    print(f"# R: degree {R_DEG}, worst relative error of erf's fit 2^{float(mp.log(r_err, 2)):.1f}", file=sys.stderr)
    n = 2**OCTAVE_BITS * round(math.log2(A_HI / A_LO) + 0.5)
    n = next(j for j in range(n + 1) if interval(j)[1] >= A_HI) + 1
    rows = []
    for j in range(n):
        m, k, c0, coef, err = fit_interval(j)
        lo, hi, _ = interval(j)
        print(f"# J={j:2d} [{float(lo):g}, {float(hi):g}) K={k} worst 2^{float(mp.log(err, 2)):.1f}", file=sys.stderr)
        rows.append((m, k, c0, coef))
    shift = mp.floor(128 * mp.log(2) * 2**43) / 2**43
    print("# BEGIN GENERATED by scripts/fit_erf.py (do not edit by hand)")
    print("# fmt: off")
    print(f"_ERF_SMALL = {ERF_SMALL!r}")
    print(f"_R = {fmt(r_coef)}")
    print(f"_OCTAVE_BITS = {OCTAVE_BITS}")
    print(f"_A_LO = {A_LO!r}")
    # Tail pass (results subnormal): exp(-p) is taken as exp(-(p - SHIFT)) 2^-128 exp(SHIFT_LO), with
    # SHIFT + SHIFT_LO = 128 ln 2 and SHIFT on the 2^-43 grid of p in [512, 1024), so p - SHIFT is exact.
    print(f"_TAIL_SHIFT = {float(shift)!r}")
    print(f"_TAIL_SHIFT_LO = {float(128 * mp.log(2) - shift)!r}")
    print("# Interval J: midpoint M, pole K, 26-bit anchor C0, coefficients of P_J (s^0 first).")
    print("_M = [")
    for i in range(0, len(rows), 8):
        print("    " + ", ".join(repr(row[0]) for row in rows[i : i + 8]) + ",")
    print("]")
    print("_K = [")
    for i in range(0, len(rows), 8):
        print("    " + ", ".join(repr(row[1]) for row in rows[i : i + 8]) + ",")
    print("]")
    print("_C0 = [")
    for i in range(0, len(rows), 4):
        print("    " + ", ".join(repr(row[2]) for row in rows[i : i + 4]) + ",")
    print("]")
    print("_P = [")
    for row in rows:
        print(f"    {fmt(row[3])},")
    print("]")
    print("# fmt: on")
    print("# END GENERATED")


if __name__ == "__main__":
    main()
