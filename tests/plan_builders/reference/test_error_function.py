"""error_function.erf / error_function.erfc against mpmath at 50 digits, and against libm.

The requirement: within 2 float64 ulp of the exact value for erf everywhere
and for erfc where the result is normal; subnormal erfc results within 2
subnormal ulps. CI checks ~20k mpmath points spread over the ranges that
matter (tiny and subnormal x, around 0, the small/large switch at 27/32, the
table's interval edges, the erfc tail down to and past underflow, negative x)
plus 10^6 points against math.erf / math.erfc with a bound that allows for
libm's own error. ``pytest -m fuzz`` runs the full 10^6-point mpmath sweep
(a minute or so) and prints the worst errors by range, libm's beside them.
Tighter where the scheme guarantees more: the table's fit (2^-59), erfc of
tiny x and deep subnormal erfc (correctly rounded but for near-ties), and
the memory a call takes beside its output.
"""

from __future__ import annotations

import itertools
import math
import os
import tracemalloc
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import numpy as np
import pytest

from sigdnn.plan_builders.reference import error_function

mp = pytest.importorskip("mpmath")

BOUND_ULPS = 2.0
TINY = 2.0**-1074
SMALLEST_NORMAL = 2.0**-1022
# Eighth-octave interval edges of error_function.py's table, and the switches between formulas.
EDGES = np.array(
    [0.125 * 2 ** (k // 8) * (1 + (k % 8) / 8) for k in range(8 * 8)]
    + [
        error_function._ERFC_SMALL,
        error_function._ERF_SMALL,
        error_function._ERF_ONE,
        error_function._A_NORMAL,
        error_function._A_ZERO,
    ]
)


def sample(n: int, seed: int) -> dict[str, np.ndarray]:
    """At least n points (19 shares of n/19), by range; both signs where the sign matters."""
    rng = np.random.default_rng(seed)
    k = -(-n // 19)

    def signed(v: np.ndarray) -> np.ndarray:
        return v * rng.choice([-1.0, 1.0], v.size)

    near = np.array([0.25, 0.5, 27 / 32, 1.0, 2.0, 4.0, 6.0])
    return {
        "uniform [-6, 6]": rng.uniform(-6, 6, 4 * k),
        "tiny 2^-1074..2^-6": signed(np.exp2(rng.uniform(-1074, -6, 2 * k))),
        "[-1, 1]": rng.uniform(-1, 1, 2 * k),
        "near 1/4 1/2 27/32 1 2 4 6": signed(near[rng.integers(0, near.size, 2 * k)] * rng.uniform(0.99, 1.01, 2 * k)),
        "interval edges +-64 ulp": signed(
            (e := EDGES[rng.integers(0, EDGES.size, 2 * k)]) + rng.integers(-64, 65, e.size) * np.spacing(e)
        ),
        "[6, 26.5] erfc tail": rng.uniform(6, 26.5, 2 * k),
        "[26.5, 27.35] erfc subnormal": rng.uniform(26.5, 27.35, 2 * k),
        "[-27.5, -1/2]": rng.uniform(-27.5, -0.5, 2 * k),
        "|x| 27.35..1e300": signed(10 ** rng.uniform(math.log10(27.35), 300, k)),
    }


def exact(x: float) -> tuple[mp.mpf, mp.mpf]:
    """(erf x, erfc x) to 50 digits, each from the function that does not cancel."""
    with mp.workdps(50):
        v = mp.mpf(x)
        if abs(v) > 1e100:  # mpmath's erfc overflows a float internally past ~1e154
            tiny = mp.exp(-(v**2)) / (abs(v) * mp.sqrt(mp.pi))
            return (1 - tiny, tiny) if v > 0 else (tiny - 1, 2 - tiny)
        if abs(v) < 1:
            e = mp.erf(v)
            return e, 1 - e
        c = mp.erfc(v)
        return 1 - c, c


def ulps(got: float, want: mp.mpf) -> float:
    """(got - want) in ulps of want (2^-1074 for subnormal and zero values)."""
    with mp.workdps(50):
        if want == 0:
            return float(mp.mpf(got) / TINY)
        _, e = mp.frexp(want)
        return float((mp.mpf(got) - want) / max(mp.mpf(2) ** (e - 53), mp.mpf(TINY)))


def errors(xs: np.ndarray) -> np.ndarray:
    """Rows (erf error, erfc error, erfc result subnormal, libm erf error, libm erfc error) in ulps."""
    got_erf, got_erfc = error_function.erf(xs), error_function.erfc(xs)
    rows = np.empty((xs.size, 5))
    for i, x in enumerate(xs.tolist()):
        e, c = exact(x)
        sub = abs(c) < SMALLEST_NORMAL
        rows[i] = (
            ulps(got_erf[i], e),
            ulps(got_erfc[i], c),
            sub,
            ulps(math.erf(x), e),
            ulps(math.erfc(x), c),
        )
    return rows


def check(by_range: dict[str, np.ndarray]) -> tuple[list[str], list[str]]:
    """(failures, one report line per range): worst |error| of ours and of libm."""
    failures, report = [], []
    for name, rows in by_range.items():
        err = np.abs(rows)
        sub = rows[:, 2] == 1
        erf_max, erfc_max = err[:, 0].max(), err[~sub, 1].max(initial=0)
        erfc_sub_max = err[sub, 1].max(initial=0)
        report.append(
            f"{name:30s} n={len(rows):7d}  erf {erf_max:.3f}  erfc {erfc_max:.3f}  erfc subnormal {erfc_sub_max:.3f}"
            f"  | libm erf {err[:, 3].max():.3f}  erfc {err[~sub, 4].max(initial=0):.3f}"
            f"  subnormal {err[sub, 4].max(initial=0):.3f}"
        )
        for what, worst in (("erf", erf_max), ("erfc", erfc_max), ("subnormal erfc", erfc_sub_max)):
            if worst > BOUND_ULPS:
                failures.append(f"{name}: {what} off by {worst:.3f} ulp")
    return failures, report


# Allowance for libm's own error on top of ours: glibc 2.36 measures up to ~1.1 ulp (erf) and
# ~3.4 ulp (erfc) against mpmath; other libms document a few ulp at most.
LIBM_ULPS = {"erf": 2.0, "erfc": 5.0}


@pytest.mark.parametrize("name", ["erf", "erfc"])
def test_against_libm(name: str) -> None:
    rng = np.random.default_rng(3)
    n = 1_000_000
    xs = np.concatenate(
        [
            rng.uniform(-6, 6, n // 2),
            rng.uniform(-28, 28, n // 4),
            rng.choice([-1.0, 1.0], n // 4) * np.exp2(rng.uniform(-1074, 5, n // 4)),
        ]
    )
    ours = getattr(error_function, name)(xs)
    libm = np.frompyfunc(getattr(math, name), 1, 1)(xs).astype(np.float64)
    # In ulps of libm's value (2^-1074 for subnormals): loose, but catches any slip anywhere.
    diff = np.abs(ours - libm) / np.spacing(np.abs(libm))
    worst = int(np.argmax(diff))
    assert diff[worst] <= BOUND_ULPS + LIBM_ULPS[name], f"{name}({xs[worst]!r}) = {ours[worst]!r}, libm {libm[worst]!r}"


def test_special_values() -> None:
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, TINY, -TINY, 1e-310, 6.0, 1e300, -1e300])
    erf = error_function.erf(x)
    assert np.array_equal(np.signbit(erf[:2]), [False, True]) and np.all(erf[:2] == 0)
    assert erf[2] == 1 and erf[3] == -1 and np.isnan(erf[4])
    assert erf[5] == TINY and erf[6] == -TINY  # 2/sqrt(pi) * 2^-1074 rounds to 2^-1074
    assert erf[7] == float(exact(1e-310)[0])
    assert erf[8] == 1 and erf[9] == 1 and erf[10] == -1
    erfc = error_function.erfc(x)
    assert erfc[0] == 1 and erfc[1] == 1 and erfc[2] == 0 and erfc[3] == 2 and np.isnan(erfc[4])
    assert erfc[5] == 1 and erfc[6] == 1 and erfc[7] == 1 and erfc[9] == 0 and erfc[10] == 2
    tail = error_function.erfc(np.array([26.5, 26.6, 27.2, 27.3, 28.0, 40.0]))
    assert 0 < tail[2] < tail[1] < SMALLEST_NORMAL < tail[0] and tail[3] == 0 and tail[4] == 0 and tail[5] == 0
    assert error_function.erfc(np.array([-27.0]))[0] == 2


def test_erf_is_odd() -> None:
    x = sample(2_000, seed=4)
    xs = np.concatenate(list(x.values()))
    assert np.array_equal(error_function.erf(-xs), -error_function.erf(xs))


@pytest.mark.parametrize("fn", [error_function.erf, error_function.erfc])
def test_shapes_and_dtypes(fn: Callable[[np.ndarray], np.ndarray]) -> None:
    grid = np.linspace(-7, 7, 60).reshape(6, 10)
    flat = fn(grid.ravel())
    for x in (grid, grid.T, grid[:, ::3], np.asfortranarray(grid)):
        got = fn(x)
        assert got.shape == x.shape and got.dtype == np.float64
        assert np.array_equal(got, fn(np.ascontiguousarray(x)).reshape(x.shape))
    assert np.array_equal(fn(grid).ravel(), flat)
    assert fn(np.float64(0.5)).shape == () and fn(np.float64(0.5)) == fn(np.array([0.5]))[0]
    assert fn(np.empty(0)).shape == (0,)
    f32 = grid.astype(np.float32)
    assert np.array_equal(fn(f32), fn(f32.astype(np.float64)))
    assert np.array_equal(fn([[-1, 0, 2]]), fn(np.array([[-1.0, 0.0, 2.0]])))


@pytest.mark.parametrize("fn", [error_function.erf, error_function.erfc])
def test_result_does_not_depend_on_neighbours(fn: Callable[[np.ndarray], np.ndarray]) -> None:
    """Blocks run whichever formula most of their elements need and the rest are redone gathered
    from many blocks (the subnormal erfc tail likewise, also from inside such a redo): an
    element's value must not depend on which of those paths it took."""
    rng = np.random.default_rng(5)
    block = error_function._BLOCK
    n = 5 * block
    sign = rng.choice([-1.0, 1.0], n)
    # Small for both functions (|x| < 2^-20) and > one block left over, large and tail mixed: the
    # large ones are redone mid-run, and the tail among them from inside that redo.
    u = rng.random(n)
    mostly_small = sign * np.where(
        u < 0.55, np.exp2(rng.uniform(-60, -21, n)), np.where(u < 0.7, rng.uniform(1, 26, n), rng.uniform(26, 30, n))
    )
    # Large for both, some past 26: the tail is redone from a majority pass too.
    wide = rng.uniform(-30, 30, block)
    # The switches themselves, among small-majority and large-majority neighbours alike.
    switches = np.array([2.0**-20, 0.125, 27 / 32, 6.0, 26.0, 27.3, 28.0])
    switches = np.concatenate([switches, -switches])
    mostly_small[:: n // switches.size][: switches.size] = switches
    wide[:: block // switches.size][: switches.size] = switches
    x = np.concatenate(
        [
            mostly_small,
            rng.uniform(-6, 6, 8 * block),  # > one block of small (|x| < 27/32) elements for erf
            wide,
            np.exp2(rng.uniform(-1074, -5, 2 * block)),
            [np.nan, np.inf, -np.inf, -0.0, 0.0],
        ]
    )
    got = fn(x)
    perm = rng.permutation(x.size)
    assert np.array_equal(fn(x[perm]), got[perm], equal_nan=True)
    picks = np.concatenate([rng.integers(0, x.size, 300), np.flatnonzero(np.isin(x, switches))])
    assert np.array_equal([fn(x[i : i + 1])[0] for i in picks], got[picks], equal_nan=True)


def test_memory_beyond_the_output_is_a_few_blocks() -> None:
    """Work arrays of one block (~1.2 MiB) whatever the size, and the elements left to the other formula
    redone whenever a block's worth has gathered: 2^20 elements, 40% of them small, spread over every
    block, take the output and at most 2.5 MiB more (a work array per element would be 64 MiB; the
    left-over indices held to the end, 6 MiB)."""
    rng = np.random.default_rng(6)
    n = 1 << 20
    x = np.where(rng.random(n) < 0.4, rng.uniform(-0.5, 0.5, n), rng.uniform(1, 30, n) * rng.choice([-1, 1], n))
    error_function.erf(x[:100])
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        out = error_function.erf(x)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak - out.nbytes <= 2.5 * 2**20, peak - out.nbytes


def test_table_invariants() -> None:
    """What the exactness argument in error_function.py relies on."""
    for c0 in error_function._C0:
        m, _ = math.frexp(c0)
        assert (m * 2**26).is_integer(), c0  # 26 significant bits: Eh*C0 and El*C0 exact
    assert (error_function._TAIL_SHIFT * 2**43).is_integer()  # p - SHIFT exact for p in [512, 1024)
    for j, m in enumerate(error_function._M[1:], start=1):
        per = 2**error_function._OCTAVE_BITS
        base = error_function._A_LO * 2 ** ((j - 1) // per)
        assert m == base * (1 + ((j - 1) % per + 0.5) / per)  # J's midpoint: a - M exact within J


def test_each_interval_fit_is_within_its_target() -> None:
    """The table itself, exactly: C0[J] + P_J(s) against F(a) = exp(a^2) erfc(a) at each interval's ends and
    24 Chebyshev points, relative error within 2^-59, scripts/fit_erf.py's target (the fits reach 2^-60.1 at
    worst). The end-to-end tests see a table error only once it grows to ulps of the result; this sees one
    of 1/64 ulp, so a coefficient slip is caught before it costs accuracy anywhere."""
    edges = [0.0] + [
        error_function._A_LO * 2 ** (k // 8) * (1 + (k % 8) / 8) for k in range(8 * 7 + 8)
    ]  # J = 0: [0, 1/8)
    edges = edges[: len(error_function._M) + 1]
    assert edges[-1] == 28.0
    with mp.workdps(30):
        for j, (lo, hi) in enumerate(itertools.pairwise(edges)):
            lo, hi = mp.mpf(lo), mp.mpf(hi)
            m, k, c0 = mp.mpf(error_function._M[j]), mp.mpf(error_function._K[j]), mp.mpf(error_function._C0[j])
            coefficients = [mp.mpf(c) for c in reversed(error_function._P[j])]
            points = [lo, hi] + [(lo + hi) / 2 + (hi - lo) / 2 * mp.cos(mp.pi * (i + 0.5) / 24) for i in range(24)]
            for a in points:
                f = mp.erfc(a) * mp.exp(a * a)
                error = abs(c0 + mp.polyval(coefficients, (a - m) / (a + k)) - f) / f
                assert error < mp.mpf(2) ** -59, (j, float(a), float(mp.log(error, 2)))


def test_erfc_of_tiny_x_is_correctly_rounded() -> None:
    """|x| < 2^-20: erfc(x) = 1 - (x + x (1/8 + R(x^2))). The sum is under 1.2e-6 with a relative error of a
    few 2^-53, so 2^-70 or less absolute: only the last subtraction's rounding counts, and the result is
    within 0.5 + 2^-17 ulp of erfc (correctly rounded but for near-ties), tighter than the 2 ulp elsewhere."""
    rng = np.random.default_rng(8)
    xs = rng.choice([-1.0, 1.0], 1500) * np.exp2(rng.uniform(-60, -20, 1500))
    worst = max(abs(ulps(g, exact(x)[1])) for x, g in zip(xs.tolist(), error_function.erfc(xs).tolist()))
    assert worst <= 0.5 + 2**-17, worst


def test_deep_subnormal_erfc_is_correctly_rounded() -> None:
    """The tail pass works scaled by 2^128, so only its last multiplication rounds into the subnormals. Before
    it the value is within 2 ulp (2^-51 relative); below 2^-1040 that is under 2^-17 subnormal ulps, so the
    result is within 0.5 + 2^-17 of them: correctly rounded but for near-ties (x from ~26.8 on)."""
    xs = np.random.default_rng(9).uniform(26.8, 27.3, 1000)
    checked = 0
    for x, g in zip(xs.tolist(), error_function.erfc(xs).tolist()):
        c = exact(x)[1]
        if c < mp.mpf(2) ** -1040:
            checked += 1
            assert abs(ulps(g, c)) <= 0.5 + 2**-17, (x, g)
    assert checked > 500


# The mpmath comparisons come last: they are the slowest tests here, and the mutation tool stops at the
# first failure, so a mutant the cheaper tests above catch costs them alone.


def test_against_mpmath() -> None:
    failures, report = check({name: errors(xs) for name, xs in sample(20_000, seed=1).items()})
    assert not failures, "\n".join(failures + report)


@pytest.mark.fuzz
def test_against_mpmath_fuzz() -> None:
    """10^6 points, spread over processes (mpmath is the slow part)."""
    chunks = [
        (name, xs[i : i + 5000]) for name, xs in sample(1_000_000, seed=2).items() for i in range(0, xs.size, 5000)
    ]
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        results = list(pool.map(errors, [xs for _, xs in chunks]))
    by_range: dict[str, list[np.ndarray]] = {}
    for (name, _), rows in zip(chunks, results):
        by_range.setdefault(name, []).append(rows)
    failures, report = check({name: np.concatenate(parts) for name, parts in by_range.items()})
    print(f"\nmax |error| in ulps over {sum(len(xs) for _, xs in chunks)} points (ours | libm's)\n" + "\n".join(report))
    assert not failures, "\n".join(failures + report)
