"""sigdnn.dtypes.round_to against exact rational rounding.

round_to is what makes the reference "round once": every reference output
goes through it. The oracle (tests/oracles.py ``round_fraction``) rounds a
``Fraction`` from the definition of each format, so a double rounding
(float64 -> float32 -> bfloat16, as ml_dtypes and torch do) cannot hide.

fp8 e4m3 ("fn": finite, NaN only) has no infinity. ml_dtypes, and so
round_to, rounds it as if the next value after 448 were 480 and stores that
as NaN: 464 (the midpoint) ties to even 448; anything above 464, and +-inf,
becomes NaN. It does not saturate. docs/ops.md's "overflow -> inf" is for
float16 / bfloat16 (and e5m2, which has an infinity, behaves the same).
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import sys
from collections.abc import Iterator
from fractions import Fraction

import hypothesis.strategies as st
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from oracles import FORMATS, SPEC, round_exact, round_fraction, round_fraction_like

from sigdnn import Graph, dtypes
from sigdnn.dtypes import DataType, DataTypeError, as_data_type, casts_once, round_to
from sigdnn.errors import GraphError, SigdnnError, UsageError

FLOATS = ("float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2")
P = 2.0  # powers of two below read as P**-8 etc.

# (float64 input, target, expected value); -0.0 means "negative zero", checked by bits.
HAND: list[tuple[float, str, float]] = [
    # bfloat16: 8 significant bits, float32's exponent range.
    (1 + P**-8 + P**-30, "bfloat16", 1.0078125),  # just above a tie: up (via float32 it ties, then goes to 1.0)
    (1 + P**-8, "bfloat16", 1.0),  # exact tie: to even (1.0)
    (1 + 3 * P**-8, "bfloat16", 1.015625),  # exact tie: to even (1 + 2**-6)
    (1 + P**-8 - P**-40, "bfloat16", 1.0),  # just below a tie
    (-(1 + P**-8 + P**-30), "bfloat16", -1.0078125),
    (3.3895313892515355e38, "bfloat16", 3.3895313892515355e38),  # max
    ((2 - P**-8) * P**127, "bfloat16", math.inf),  # max + ulp/2 ties to even: infinity
    (np.nextafter((2 - P**-8) * P**127, 0), "bfloat16", 3.3895313892515355e38),
    (1e300, "bfloat16", math.inf),  # beyond float32, too
    (-1e300, "bfloat16", -math.inf),
    (P**-133, "bfloat16", P**-133),  # smallest subnormal
    (P**-134, "bfloat16", 0.0),  # half of it: tie to even (zero)
    (P**-134 + P**-160, "bfloat16", P**-133),  # below float32's subnormals: round-to-odd must keep it
    (3 * P**-134, "bfloat16", P**-132),  # tie between 1 and 2 units: even
    (-(P**-140), "bfloat16", -0.0),
    (P**-200, "bfloat16", 0.0),
    # float16: 11 bits, emin -14, max 65504.
    (1 + P**-11, "float16", 1.0),
    (1 + P**-11 + P**-40, "float16", 1 + P**-10),
    (65504.0, "float16", 65504.0),
    (65519.99, "float16", 65504.0),
    (65520.0, "float16", math.inf),
    (-65520.0, "float16", -math.inf),
    (P**-24, "float16", P**-24),
    (P**-25, "float16", 0.0),
    (P**-25 + P**-60, "float16", P**-24),
    (3 * P**-25, "float16", P**-23),
    (-(P**-26), "float16", -0.0),
    # float32.
    (1 + P**-24, "float32", 1.0),
    (1 + P**-24 + P**-50, "float32", 1 + P**-23),
    ((2 - P**-24) * P**127, "float32", math.inf),
    (np.nextafter((2 - P**-24) * P**127, 0), "float32", float(np.finfo(np.float32).max)),
    (P**-150, "float32", 0.0),
    (P**-150 + P**-200, "float32", P**-149),
    (-(P**-151), "float32", -0.0),
    # fp8 e4m3 (fn): 4 bits, emin -6, max 448, no infinity.
    (1 + P**-4, "fp8_e4m3", 1.0),
    (1 + P**-4 + P**-30, "fp8_e4m3", 1.125),  # through float32 this would tie and drop to 1.0
    (448.0, "fp8_e4m3", 448.0),
    (464.0, "fp8_e4m3", 448.0),  # midpoint to the NaN slot: even is 448
    (464.0 + P**-40, "fp8_e4m3", math.nan),
    (465.0, "fp8_e4m3", math.nan),
    (1e300, "fp8_e4m3", math.nan),
    (-465.0, "fp8_e4m3", math.nan),
    (P**-9, "fp8_e4m3", P**-9),
    (P**-10, "fp8_e4m3", 0.0),
    (P**-10 + P**-40, "fp8_e4m3", P**-9),
    (-(P**-11), "fp8_e4m3", -0.0),
    # fp8 e5m2: 3 bits, emin -14, max 57344, has infinity.
    (57344.0, "fp8_e5m2", 57344.0),
    (61439.99, "fp8_e5m2", 57344.0),
    (61440.0, "fp8_e5m2", math.inf),
    (P**-16, "fp8_e5m2", P**-16),
    (P**-17, "fp8_e5m2", 0.0),
    (3 * P**-17, "fp8_e5m2", P**-15),
    (1 + P**-3 + P**-35, "fp8_e5m2", 1.25),
]
# Non-finite inputs, every float target.
HAND += [(v, d, v) for d in ("float32", "float16", "bfloat16", "fp8_e5m2") for v in (math.inf, -math.inf, -0.0)]
HAND += [(math.nan, d, math.nan) for d in FLOATS]
HAND += [(v, "fp8_e4m3", math.nan) for v in (math.inf, -math.inf)] + [(-0.0, "fp8_e4m3", -0.0)]


def same(got: float, want: float) -> bool:
    """Equal values with equal sign of zero; NaN equals NaN."""
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


NARROW = (DataType.BFLOAT16, DataType.FP8_E4M3, DataType.FP8_E5M2)
PATHS = ("direct", "through float32")  # round_to's two ways to bfloat16 / fp8 (casts_once)


@contextlib.contextmanager
def rounding_path(path: str) -> Iterator[None]:
    """round_to's float64 -> bfloat16 / fp8 by ml_dtypes' own cast, or by rounding to odd through float32 first
    (what an ml_dtypes that rounds twice gets): both must give the oracle's answers."""
    if path == "direct" and not all(casts_once(d) for d in NARROW):
        pytest.skip("this ml_dtypes rounds float64 -> bfloat16 / fp8 twice: round_to always goes through float32")
    saved = dict(dtypes._CASTS_ONCE)
    if path == "through float32":
        dtypes._CASTS_ONCE.update(dict.fromkeys(NARROW, False))
    try:
        yield
    finally:
        dtypes._CASTS_ONCE.clear()
        dtypes._CASTS_ONCE.update(saved)


def sigdnn_round(values: np.ndarray, dtype: str) -> np.ndarray:
    out = round_to(np.asarray(values), as_data_type(dtype))
    assert out.dtype == FORMATS[dtype][0]
    return out


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize(("x", "dtype", "want"), HAND, ids=[f"{d}-{x!r}" for x, d, _ in HAND])
def test_hand_worked_cases(x: float, dtype: str, want: float, path: str) -> None:
    assert same(round_fraction_like(x, dtype), want), "the oracle disagrees with the hand-worked answer"
    with rounding_path(path):
        got = float(sigdnn_round(np.array([x], dtype=np.float64), dtype)[0])
    assert same(got, want), f"round_to({x!r}, {dtype}) = {got!r}, want {want!r}"


def test_ml_dtypes_alone_double_rounds_where_round_to_does_not() -> None:
    """Why round_to exists: ml_dtypes casts float64 -> bfloat16 through float32."""
    x = np.array([1 + P**-8 + P**-30])
    assert float(round_to(x, DataType.BFLOAT16)[0]) == 1.0078125
    if float(x.astype(FORMATS["bfloat16"][0])[0]) != 1.0:
        pytest.skip("this ml_dtypes rounds float64 -> bfloat16 once; round_to's round-to-odd step is now redundant")


def test_a_cast_through_float32_is_not_taken_for_one_rounding() -> None:
    """casts_once's witnesses: a cast that goes through float32 fails them, and round_to then rounds to odd."""
    for dtype in NARROW:
        assert not casts_once(dtype, cast=lambda v, t: v.astype(np.float32).astype(t))
        assert casts_once(dtype, cast=lambda v, t, d=dtype: round_to(v, d))  # one rounding, by construction
        assert not casts_once(dtype, cast=lambda v, t, d=dtype: np.abs(round_to(v, d).astype(np.float64)).astype(t))


@pytest.mark.parametrize("path", PATHS)
def test_round_to_rounds_to_odd_first_only_where_the_cast_would_round_twice(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    real = dtypes._float64_to_float32_round_to_odd
    monkeypatch.setattr(dtypes, "_float64_to_float32_round_to_odd", lambda x: calls.append(x.size) or real(x))
    with rounding_path(path):
        for dtype in NARROW:
            round_to(np.array([1.5, 2.5]), dtype)
        round_to(np.array([1.5, 2.5], np.float32), DataType.BFLOAT16)  # float32 in: one rounding already
    assert calls == ([2, 2, 2] if path == "through float32" else [])


def test_casts_once_answers_once_per_dtype_and_a_test_cast_leaves_no_answer() -> None:
    with rounding_path("through float32"):
        dtypes._CASTS_ONCE.clear()
        casts_once(DataType.BFLOAT16, cast=lambda v, t: v.astype(np.float32).astype(t))
        assert dtypes._CASTS_ONCE == {}
        answer = casts_once(DataType.BFLOAT16)
        assert {DataType.BFLOAT16: answer} == dtypes._CASTS_ONCE


def test_e4m3_overflow_is_what_ml_dtypes_does() -> None:
    """e4m3fn has no infinity: ml_dtypes gives NaN past the 448/480 midpoint, and for +-inf."""
    e4m3 = FORMATS["fp8_e4m3"][0]
    x = np.array([448.0, 463.0, 464.0, 465.0, 1e4, math.inf, -math.inf, -465.0], dtype=np.float32)
    native = x.astype(e4m3).astype(np.float64)
    ours = round_to(x.astype(np.float64), DataType.FP8_E4M3).astype(np.float64)
    assert np.array_equal(native, ours, equal_nan=True)
    assert ours[:3].tolist() == [448.0, 448.0, 448.0] and np.isnan(ours[3:]).all()


def test_round_to_is_vectorized_and_keeps_shape() -> None:
    x = np.array([[1 + P**-8 + P**-30, -(P**-140)], [65520.0, math.nan]])
    got = round_to(x, DataType.BFLOAT16)
    assert got.shape == (2, 2) and got.dtype == FORMATS["bfloat16"][0]
    assert got[0, 0] == 1.0078125 and np.signbit(got[0, 1]) and np.isnan(got[1, 1])


# -- properties against the Fraction oracle ---------------------------------


@st.composite
def near_ties(draw: st.DrawFn, dtype: str) -> float:
    """A float64 at, or within a few float64 steps of, a midpoint of ``dtype``.

    Midpoints are where a second rounding goes wrong; plain random floats
    almost never land there.
    """
    fmt = SPEC[dtype]
    e = draw(st.integers(fmt.emin - fmt.precision, math.floor(math.log2(fmt.max_finite)) + 1))
    unit = Fraction(2) ** (max(e, fmt.emin) - fmt.precision + 1)
    n = draw(st.integers(0, 2**fmt.precision))
    mid = (n + Fraction(1, 2)) * unit
    shift = draw(st.integers(-60, -1))
    k = draw(st.sampled_from([-3, -1, 0, 0, 1, 2]))
    value = float(mid + k * mid * Fraction(2) ** shift)
    return -value if draw(st.booleans()) else value


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", FLOATS)
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_round_to_matches_fraction_oracle(dtype: str, path: str, data: st.DataObject) -> None:
    x = data.draw(st.one_of(st.floats(width=64), near_ties(dtype)), label="x")
    with rounding_path(path):
        got = float(sigdnn_round(np.array([x]), dtype)[0])
    want = round_fraction_like(x, dtype)
    assert same(got, want), f"round_to({x!r}, {dtype}) = {got!r}, want {want!r}"


@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_round_exact_oracle_matches_fractions(dtype: str) -> None:
    """The vectorized test oracle agrees with the Fraction one (near ties, tails, specials)."""
    x = _stress_values(np.random.default_rng(7), dtype, 4000)
    got = round_exact(x, dtype).astype(np.float64)
    for xi, gi in zip(x.tolist(), got.tolist()):
        want = round_fraction_like(xi, dtype)
        assert same(gi, want), f"round_exact({xi!r}, {dtype}) = {gi!r}, want {want!r}"


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("dtype", ("float32", "float16", "bfloat16"))
def test_round_to_matches_round_exact_in_bulk(dtype: str, path: str) -> None:
    """A million near-tie values: bit-identical to the independent vectorized oracle."""
    x = _stress_values(np.random.default_rng(11), dtype, 1_000_000)
    uint = FORMATS[dtype][1]
    with rounding_path(path):
        got = sigdnn_round(x, dtype).view(uint)
    want = round_exact(x, dtype).view(uint)
    nan = np.isnan(x)
    bad = np.flatnonzero((got != want) & ~nan)
    assert bad.size == 0, f"{bad.size} mismatches, first x={x[bad[0]]!r}"
    assert np.isnan(sigdnn_round(x[nan], dtype).astype(np.float64)).all()


def _stress_values(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    """Midpoints of ``dtype`` nudged by 0..3 float64 steps either way, plus extremes and specials."""
    target, uint = FORMATS[dtype]
    nbits = 8 * target.itemsize
    bits = rng.integers(0, 2 ** (nbits - 1), size=n, dtype=np.int64)
    with np.errstate(invalid="ignore"):
        v = bits.astype(uint).view(target).astype(np.float64)
        nxt = (bits + 1).astype(uint).view(target).astype(np.float64)
        ok = np.isfinite(v) & np.isfinite(nxt)
        mid = np.where(ok, (v + nxt) / 2, 1.0)
    steps = rng.integers(-3, 4, size=n)
    x = mid.copy()
    for _ in range(3):
        x = np.where(steps > 0, np.nextafter(x, np.inf), np.where(steps < 0, np.nextafter(x, -np.inf), x))
        steps = steps - np.sign(steps)
    x = np.where(rng.random(n) < 0.5, -x, x)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e300, -1e300, 5e-324, 1e-310, 3.4e38, 1e-45])
    logu = np.exp2(rng.uniform(-160, 140, size=n // 4)) * rng.choice([-1.0, 1.0], size=n // 4)
    return np.concatenate([x, specials, logu])


# -- integer inputs (int64 results of integer compute) ----------------------

INT_HAND: list[tuple[int, str, float]] = [
    (2**24 + 2**16 + 1, "bfloat16", 2**24 + 2**17),  # above a tie; int -> float32 first would tie it
    (2**24 + 2**16, "bfloat16", 2**24),  # tie: even
    (2**62 + 2**54 + 1, "bfloat16", 2**62 + 2**55),  # beyond 2**53: int -> float64 first would tie it
    (-(2**62 + 2**54 + 1), "bfloat16", -(2**62 + 2**55)),
    (2**62 + 2**38 + 1, "float32", 2**62 + 2**39),
    (2**24 + 1, "float32", 2**24),
    (2**24 + 3, "float32", 2**24 + 4),
    (2049, "float16", 2048),
    (2051, "float16", 2052),
    (65519, "float16", 65504),
    (65520, "float16", math.inf),
    (-(2**40), "float16", -math.inf),
    (17, "fp8_e4m3", 16),
    (19, "fp8_e4m3", 20),
    (465, "fp8_e4m3", math.nan),
    (2**53 + 2**50 + 1, "fp8_e4m3", math.nan),
    (2**63 - 1, "bfloat16", 2**63),
    (-(2**63), "fp8_e5m2", -math.inf),
    (2**53 + 1, "float64", 2**53),  # float64: plain nearest-even
    (2**60 + 2**7 + 1, "float64", 2**60 + 2**8),
]


@pytest.mark.parametrize(("x", "dtype", "want"), INT_HAND, ids=[f"{d}-{x}" for x, d, _ in INT_HAND])
def test_int64_to_float_rounds_once(x: int, dtype: str, want: float) -> None:
    if dtype in SPEC:
        assert same(round_fraction(Fraction(x), SPEC[dtype]), want), "oracle disagrees with the hand answer"
    got = float(round_to(np.array([x], dtype=np.int64), as_data_type(dtype))[0])
    assert same(got, want), f"round_to({x}, {dtype}) = {got!r}, want {want!r}"


@pytest.mark.parametrize("dtype", FLOATS)
@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_int64_to_float_matches_fraction_oracle(dtype: str, data: st.DataObject) -> None:
    big = st.integers(-(2**63), 2**63 - 1)
    shift = st.integers(0, 62)
    near_power = st.builds(
        lambda s, d, sign: sign * ((1 << s) + d), shift, st.integers(-3, 3), st.sampled_from([-1, 1])
    )
    odd_tie = st.builds(
        lambda s, m, d: (m << s) + (1 << max(s - 1, 0)) + d,
        st.integers(1, 40),
        st.integers(1, 2**20),
        st.integers(-2, 2),
    )
    x = data.draw(st.one_of(big, near_power, odd_tie).filter(lambda v: -(2**63) <= v < 2**63), label="x")
    got = float(round_to(np.array([x], dtype=np.int64), as_data_type(dtype))[0])
    want = round_fraction(Fraction(x), SPEC[dtype])
    assert same(got, want), f"round_to({x}, {dtype}) = {got!r}, want {want!r}"


# -- float -> integer: a C cast truncates toward zero ------------------------

TRUNC: list[tuple[float, str, int]] = [
    (2.7, "int32", 2),
    (-2.7, "int32", -2),
    (-0.5, "int32", 0),
    (0.999999, "int8", 0),
    (-0.0, "int64", 0),
    (127.9, "int8", 127),
    (-128.9, "int8", -128),
    (255.5, "uint8", 255),
    (-0.75, "uint8", 0),
    (2147483647.9, "int32", 2147483647),
    (-2147483648.9, "int32", -2147483648),
    (-7 / 2, "int32", -3),
    (float(2**62), "int64", 2**62),
    (-(2.0**63), "int64", -(2**63)),
    (4503599627370495.5, "int64", 4503599627370495),
]


@pytest.mark.parametrize(("x", "dtype", "want"), TRUNC, ids=[f"{d}-{x!r}" for x, d, _ in TRUNC])
def test_float_to_int_truncates_toward_zero(x: float, dtype: str, want: int) -> None:
    got = round_to(np.array([x], dtype=np.float64), as_data_type(dtype))
    assert got.dtype == np.dtype(dtype) and int(got[0]) == want


@settings(max_examples=200, deadline=None)
@given(x=st.floats(-(2.0**31) + 1, 2.0**31 - 1), dtype=st.sampled_from(["int32", "int64"]))
def test_float_to_int_truncation_property(x: float, dtype: str) -> None:
    assert int(round_to(np.array([x]), as_data_type(dtype))[0]) == math.trunc(x)


def test_bool_is_nonzero() -> None:
    x = np.array([0.0, -0.0, 1e-300, -2.0, math.inf, math.nan])
    assert round_to(x, DataType.BOOL).tolist() == [False, False, True, True, True, True]
    assert round_to(np.array([0, 3, -1]), DataType.BOOL).tolist() == [False, True, True]


def test_float64_and_same_width_are_identity() -> None:
    x = np.array([1 + 2.0**-52, -(2.0**-1074), math.inf])
    assert np.array_equal(round_to(x, DataType.FLOAT64), x)
    f = np.array([1.5, -3.25], dtype=np.float32)
    assert np.array_equal(round_to(f, DataType.FLOAT32), f)


# -- as_data_type: the spellings users type -------------------------------------------------------
SPELLINGS = {
    "float32": [
        "float32",
        "FLOAT32",
        "f32",
        "fp32",
        "FP32",
        "single",
        " float32 ",
        "<f4",
        "torch.float32",
        "torch.float",
    ],
    "float16": ["float16", "f16", "fp16", "half", "HALF", "f2", "torch.half"],
    "bfloat16": ["bfloat16", "bf16", "BF16", "torch.bfloat16"],
    "float64": ["float64", "f64", "fp64", "double", "<f8", "torch.double"],
    "fp8_e4m3": ["fp8_e4m3", "FP8_E4M3", "e4m3", "e4m3fn", "float8_e4m3fn", "fp8_e4m3fn", "torch.float8_e4m3fn"],
    "fp8_e5m2": ["fp8_e5m2", "e5m2", "float8_e5m2", "torch.float8_e5m2"],
    "int8": ["int8", "i1", "torch.int8"],
    "uint8": ["uint8", "u1", "torch.uint8"],
    "int32": ["int32", "i32", "i4", "torch.int32", "torch.int"],
    "int64": ["int64", "i64", "<i8", "torch.int64", "torch.long"],
    "bool": ["bool", "boolean", "?", "b1", "torch.bool"],
}


@pytest.mark.parametrize(("name", "spelling"), [(n, s) for n, spellings in SPELLINGS.items() for s in spellings])
def test_as_data_type_names(name: str, spelling: str) -> None:
    assert as_data_type(spelling) is DataType(name)


@pytest.mark.parametrize(
    ("value", "name"),
    [
        (np.float32, "float32"),
        (np.dtype("float16"), "float16"),
        (np.dtype(">f4"), "float32"),  # a byte order is not a data type
        (np.int64, "int64"),
        (bool, "bool"),
        (np.bool_, "bool"),
        (ml_dtypes.bfloat16, "bfloat16"),
        (np.dtype(ml_dtypes.float8_e4m3fn), "fp8_e4m3"),
        (ml_dtypes.float8_e5m2, "fp8_e5m2"),
        (DataType.INT8, "int8"),
    ],
)
def test_as_data_type_numpy_and_ml_dtypes(value: object, name: str) -> None:
    assert as_data_type(value) is DataType(name)


def test_as_data_type_torch_dtypes() -> None:
    torch = pytest.importorskip("torch")
    pairs = {
        torch.float32: "float32",
        torch.float: "float32",
        torch.float16: "float16",
        torch.bfloat16: "bfloat16",
        torch.float64: "float64",
        torch.float8_e4m3fn: "fp8_e4m3",
        torch.float8_e5m2: "fp8_e5m2",
        torch.int8: "int8",
        torch.uint8: "uint8",
        torch.int32: "int32",
        torch.int64: "int64",
        torch.bool: "bool",
    }
    for value, name in pairs.items():
        assert as_data_type(value) is DataType(name), value
    with pytest.raises(DataTypeError, match=r"torch.complex64 has no sigdnn data type; sigdnn has float32, "):
        as_data_type(torch.complex64)


def test_torch_dtypes_are_recognized_without_importing_torch() -> None:
    code = (
        "import sys, sigdnn.dtypes as d\n"
        "class dtype:\n"
        "    def __str__(self): return 'torch.bfloat16'\n"
        "dtype.__module__ = 'torch'\n"
        "print(d.as_data_type(dtype()), 'torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["bfloat16", "False"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "float",
            r"'float' is ambiguous: cuDNN's FLOAT is 32-bit, NumPy's and Python's float is 64-bit: say 'float32' or 'float64'",
        ),
        ("FLOAT", r"'FLOAT' is ambiguous"),
        (float, r"float \(the Python type\) is ambiguous"),
        ("int", r"'int' is ambiguous: C's int is 32-bit"),
        (int, r"int \(the Python type\) is ambiguous"),
        ("i8", r"'i8' is ambiguous: sigdnn's short name i8 is int8, NumPy's 'i8' is int64"),
        ("u8", r"'u8' is ambiguous"),
    ],
)
def test_ambiguous_names_are_refused_not_guessed(value: object, message: str) -> None:
    with pytest.raises(DataTypeError, match=message):
        as_data_type(value)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("fp33", r"unknown data type 'fp33' \(did you mean 'float32'\?\); sigdnn has float32, float16, bfloat16"),
        ("bfloat61", r"did you mean 'bfloat16'\?"),
        ("float8_e4m3fnn", r"did you mean 'fp8_e4m3'\?"),
        ("l", r"unknown data type 'l';"),  # NumPy's platform-dependent codes are not taken
        ("int_", r"unknown data type 'int_'"),
        ("<c8", r"unknown data type '<c8'"),
        ("x" * 1000, r"unknown data type 'xxxx.*\.\.\.; sigdnn has"),
        (ml_dtypes.float8_e4m3, r"has no sigdnn data type"),  # IEEE-style e4m3 (with infinities) is another format
        (np.int16, r"<class 'numpy.int16'> has no sigdnn data type"),
        (np.dtype("V2"), r"has no sigdnn data type"),
        (None, r"no data type given \(None\)"),
        (3.5, r"3.5 is not a data type; give a name \(float32, .*\), a NumPy / ml_dtypes dtype or a torch dtype"),
        (object(), r"is not a data type"),
    ],
)
def test_unknown_data_types(value: object, message: str) -> None:
    with pytest.raises(DataTypeError, match=message):
        as_data_type(value)


def test_an_object_whose_dtype_raises_is_a_data_type_error() -> None:
    class Hostile:
        @property
        def dtype(self) -> object:
            raise RuntimeError("boom")

    with pytest.raises(DataTypeError, match="is not a data type"):
        as_data_type(Hostile())


def test_data_type_error_is_caught_by_every_convention() -> None:
    for base in (SigdnnError, GraphError, UsageError, ValueError, TypeError):
        with pytest.raises(base):
            as_data_type("fp33")


def test_graph_builder_takes_the_new_spellings() -> None:
    g = Graph("g", io_dtype="fp16", compute_dtype="FP32")
    assert g.io_dtype is DataType.FLOAT16 and g.compute_dtype is DataType.FLOAT32
    with pytest.raises(GraphError, match="'float' is ambiguous"):
        Graph("g", io_dtype="float")


@pytest.mark.parametrize("value", [1.0, 1.0 + 2.0**-30, 2.0**-140, 0.0, np.inf, np.nan])
def test_round_to_takes_zero_dimensional_arrays(value: float) -> None:
    """A graph scalar is a 0-d array: the fast and the general path of round-to-odd both keep its shape."""
    from sigdnn.dtypes import as_data_type, round_to

    got = round_to(np.asarray(value), as_data_type("bfloat16"))
    assert got.shape == ()
    want = np.asarray([value]).astype(ml_dtypes.bfloat16)[0]  # these values round the same by any route
    assert (np.isnan(got) and np.isnan(want)) or got == want
