"""Reference matmul: exact against torch.matmul in float64 and a triple-loop oracle.

Same standard as conv_fprop: within one unit of the output dtype of the
exactly rounded float64 product, bit for bit where the inputs make every
float64 sum exact; integer matmul exact. Batch dims broadcast; a and b are
laid out in the strides the graph declares (transposed, padded rows).
"""

from __future__ import annotations

import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracles_conv import (
    FORMATS,
    brute_matmul,
    exact_round,
    packed_strides,
    random_values,
    strided_array,
    ulp_distance,
)

import sigdnn

DTYPES = ("float32", "float16", "bfloat16")
EXECUTOR = sigdnn.Executor()
Shape = tuple[int, ...]

SHAPES: list[tuple[Shape, Shape]] = [
    ((7, 13), (13, 5)),
    ((1, 1), (1, 1)),
    ((3, 9, 33), (3, 33, 1)),
    ((2, 1, 5, 7), (1, 3, 7, 11)),  # both batch dims broadcast
    ((4, 1, 17), (1, 17, 3)),
    ((6, 10), (2, 3, 10, 4)),  # rank 2 @ rank 4
    ((2, 3, 9, 1), (1, 2)),  # K = 1, rank 4 @ rank 2
    ((5, 2, 65), (65, 7)),
    ((1, 4, 3, 301), (2, 1, 301, 5)),  # long reduction
]
LAYOUTS = ("packed", "b-transposed", "padded")


def strides_for(dims: Shape, layout: str, which: str) -> tuple[int, ...]:
    """Element strides: row-major, b column-major ("b-transposed"), or rows and batches padded."""
    order = list(range(len(dims)))
    if layout == "b-transposed" and which == "b":
        order[-2:] = order[-1], order[-2]
    pad = [2, 1, 3, 5][-len(dims) :] if layout == "padded" else None
    return packed_strides(dims, order, pad)


def run_reference(
    a: np.ndarray,
    b: np.ndarray,
    dtype: str,
    layout: str = "packed",
    out_dtype: str | None = None,
    compute: str = "float32",
) -> np.ndarray:
    """Build c = a @ b with the declared strides, run the reference, return c."""
    out_dtype = out_dtype or dtype
    g = sigdnn.Graph("matmul", io_dtype=dtype, compute_dtype=compute)
    at = g.tensor("a", dims=a.shape, strides=strides_for(a.shape, layout, "a"))
    bt = g.tensor("b", dims=b.shape, strides=strides_for(b.shape, layout, "b"))
    c = g.matmul(at, bt, name="mm")
    c.set_output(True).set_name("c").set_data_type(out_dtype)
    want_dims = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    assert c.dims == want_dims
    store = sigdnn.DataType(dtype).numpy
    fill = 0 if store.kind in "iu" else np.nan  # poison the gaps a padded layout leaves
    pack = {"a": strided_array(a, at.strides, store, fill), "b": strided_array(b, bt.strides, store, fill)}
    out = EXECUTOR.execute(EXECUTOR.prepare(g), pack)["c"]
    assert out.shape == want_dims
    assert out.dtype == sigdnn.DataType(out_dtype).numpy
    return out


def torch_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    import torch

    return torch.matmul(torch.from_numpy(np.ascontiguousarray(a)), torch.from_numpy(np.ascontiguousarray(b))).numpy()


def assert_rounded_equal(got: np.ndarray, exact64: np.ndarray, dtype: str, max_ulps: int, what: str) -> None:
    """got must be within max_ulps of exact64 rounded (exactly) to dtype."""
    want = exact_round(exact64, dtype)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    dist = ulp_distance(got, want, dtype)
    worst = np.unravel_index(np.argmax(dist), dist.shape)
    assert dist.max() <= max_ulps, (
        f"{what}: {int((dist > max_ulps).sum())} of {dist.size} elements off by more than {max_ulps} ulp; "
        f"worst at {worst}: got {got[worst]!r}, want {want[worst]!r} (float64 {exact64[worst]!r})"
    )


def check_against_torch(a_shape: Shape, b_shape: Shape, dtype: str, exact: bool, layout: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = random_values(rng, a_shape, dtype, exact)
    b = random_values(rng, b_shape, dtype, exact)
    got = run_reference(a, b, dtype, layout)
    what = f"{list(a_shape)}@{list(b_shape)} {dtype} {layout} exact={exact}"
    assert_rounded_equal(got, torch_matmul(a, b), dtype, 0 if exact else 1, what)


# -- the rounding oracle itself ----------------------------------------------------


def fraction_round(value: float, dtype: str) -> float:
    """Round-to-nearest-even with rationals only: the slow, obviously right way."""
    info = ml_dtypes.finfo(FORMATS[dtype][0])
    f = Fraction(value)
    if f == 0:
        return value
    mag = abs(f)
    e = int(info.minexp)
    while Fraction(2) ** (e + 1) <= mag:
        e += 1
    quantum = Fraction(2) ** (e - info.nmant)
    steps = mag / quantum
    whole = steps.numerator // steps.denominator
    rest = steps - whole
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and whole % 2):
        whole += 1
    rounded = whole * quantum
    out = float("inf") if rounded > Fraction(float(info.max)) else float(rounded)
    return -out if f < 0 else out


@pytest.mark.parametrize("dtype", DTYPES)
def test_exact_round_oracle_matches_fractions(dtype: str) -> None:
    """The tests' rounding: ties, near-ties, subnormals, overflow, double-rounding traps."""
    target = FORMATS[dtype][0]
    info = ml_dtypes.finfo(target)
    rng = np.random.default_rng(zlib.crc32(dtype.encode()))
    exps = rng.integers(int(info.minexp) - info.nmant, int(info.maxexp), 400)
    lo = np.abs(rng.standard_normal(400) * np.exp2(exps.astype(np.float64))).astype(target)
    lo = lo[np.isfinite(lo) & (lo < info.max)]
    hi = np.nextafter(lo, np.array(np.inf, dtype=target))
    mid = (lo.astype(np.float64) + hi.astype(np.float64)) / 2
    top = float(info.max)
    values = np.concatenate(
        [
            rng.standard_normal(300) * np.exp2(rng.integers(-30, 30, 300).astype(np.float64)),
            mid,
            -mid,
            np.nextafter(mid, np.inf),
            np.nextafter(mid, -np.inf),
            [0.0, -0.0, 1e-300, -1e-300, top, top * (1 + 2.0**-12), 2.0**25 + 2.0**17 + 1, -(2.0**25 + 2.0**17 + 1)],
            [top + (top - float(np.nextafter(np.array(top, dtype=target), np.array(0, dtype=target)))) / 2],
        ]
    )
    got = exact_round(values, dtype).astype(np.float64)
    want = np.array([fraction_round(float(v), dtype) for v in values])
    bad = np.flatnonzero(got != want)
    assert bad.size == 0, f"{dtype}: {values[bad[:5]]} -> {got[bad[:5]]}, want {want[bad[:5]]}"
    assert np.array_equal(np.signbit(got), np.signbit(values))


# -- 3. against torch --------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_matches_torch(a_shape: Shape, b_shape: Shape, dtype: str, layout: str) -> None:
    pytest.importorskip("torch")
    seed = zlib.crc32(f"{a_shape}{b_shape}{dtype}{layout}".encode())
    check_against_torch(a_shape, b_shape, dtype, exact=False, layout=layout, seed=seed)
    check_against_torch(a_shape, b_shape, dtype, exact=True, layout=layout, seed=seed + 1)


def test_double_rounding_trap_bfloat16() -> None:
    """2^25 + 2^17 + 1 rounds to 2^25 + 2^18 in bfloat16; via float32 it would become 2^25."""
    a = np.array([[2.0**25, 2.0**17, 1.0]])
    got = run_reference(a, np.ones((3, 1)), "bfloat16")
    assert float(got[0, 0]) == 2.0**25 + 2.0**18


def test_float16_ties_and_overflow() -> None:
    a = np.array([[2048, 1], [2048, 3], [65504, 16], [-65504, -15]], dtype=np.float64)
    got = run_reference(a, np.ones((2, 1)), "float16")
    assert got.ravel().tolist() == [2048.0, 2052.0, np.inf, -65504.0]


@pytest.mark.parametrize(("dtype", "out"), [("float16", "float32"), ("bfloat16", "float32"), ("float32", "float16")])
def test_output_dtype_differs_from_inputs(dtype: str, out: str) -> None:
    pytest.importorskip("torch")
    rng = np.random.default_rng(2)
    for exact in (False, True):
        a = random_values(rng, (2, 1, 6, 40), dtype, exact)
        b = random_values(rng, (3, 40, 5), dtype, exact)
        got = run_reference(a, b, dtype, "b-transposed", out_dtype=out)
        assert_rounded_equal(got, torch_matmul(a, b), out, 0 if exact else 1, f"{dtype}->{out}")


# -- integers ------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_int8_int32_exact(a_shape: Shape, b_shape: Shape, layout: str) -> None:
    """int8 inputs, int32 compute and output: exact, extremes included."""
    rng = np.random.default_rng(zlib.crc32(f"{a_shape}{b_shape}".encode()))
    a = rng.integers(-128, 128, size=a_shape)
    b = rng.integers(-128, 128, size=b_shape)
    a.flat[0], b.flat[0] = -128, -128
    got = run_reference(a, b, "int8", layout, out_dtype="int32", compute="int32")
    np.testing.assert_array_equal(got, np.matmul(a.astype(np.int64), b.astype(np.int64)))
    torch = pytest.importorskip("torch")
    np.testing.assert_array_equal(got, torch.matmul(torch.from_numpy(a), torch.from_numpy(b)).numpy())


def test_int8_to_bfloat16_rounds_once() -> None:
    """An int32 sum of 2^25 + 2^17 + 1 stored as bfloat16 is 2^25 + 2^18 (not 2^25 via float32)."""
    a = np.array([[-128] * 2056 + [1]])
    got = run_reference(a, a.T.copy(), "int8", out_dtype="bfloat16", compute="int32")
    assert float(got[0, 0]) == 2.0**25 + 2.0**18


@pytest.mark.parametrize("compute", ["int32", "int8"])
def test_integer_compute_over_float_inputs_does_not_truncate(compute: str) -> None:
    """An integer compute type must not read float16 inputs as truncated integers."""
    a = np.array([[0.5, 1.5, -2.25], [3.0, 0.125, 7.5]])
    b = np.array([[1.5, -0.5], [0.25, 2.0], [-1.0, 0.75]])
    got = run_reference(a, b, "float16", compute=compute)
    np.testing.assert_array_equal(got, exact_round(a @ b, "float16"))


# -- brute force ---------------------------------------------------------------------

TINY: list[tuple[Shape, Shape]] = [
    ((3, 4), (4, 2)),
    ((2, 1, 3, 2), (1, 3, 2, 3)),
    ((2, 3, 5), (5, 1)),
    ((1, 4), (3, 4, 2)),
    ((3, 1, 2, 3), (2, 3, 2)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("a_shape", "b_shape"), TINY, ids=lambda s: "x".join(map(str, s)))
def test_matches_triple_loop(a_shape: Shape, b_shape: Shape, dtype: str) -> None:
    rng = np.random.default_rng(9)
    for exact, layout in ((False, "packed"), (True, "padded"), (True, "b-transposed")):
        a = random_values(rng, a_shape, dtype, exact)
        b = random_values(rng, b_shape, dtype, exact)
        got = run_reference(a, b, dtype, layout)
        assert_rounded_equal(got, brute_matmul(a, b), dtype, 0 if exact else 1, f"{a_shape}@{b_shape} {dtype}")


@pytest.mark.parametrize(("a_shape", "b_shape"), TINY, ids=lambda s: "x".join(map(str, s)))
def test_int8_matches_triple_loop(a_shape: Shape, b_shape: Shape) -> None:
    rng = np.random.default_rng(10)
    a = rng.integers(-128, 128, size=a_shape).astype(np.int8)
    b = rng.integers(-128, 128, size=b_shape).astype(np.int8)
    got = run_reference(a, b, "int8", "b-transposed", out_dtype="int32", compute="int32")
    np.testing.assert_array_equal(got, brute_matmul(a, b))


def test_float64_exact_sums_match_triple_loop() -> None:
    rng = np.random.default_rng(12)
    a = rng.integers(-1000, 1001, size=(2, 1, 4, 6)).astype(np.float64)
    b = rng.integers(-1000, 1001, size=(3, 6, 5)).astype(np.float64)
    got = run_reference(a, b, "float64", "padded", compute="float64")
    np.testing.assert_array_equal(got, brute_matmul(a, b))


# -- 4. generated shapes ---------------------------------------------------------------


@st.composite
def matmul_shapes(draw: st.DrawFn, max_mnk: int = 12) -> tuple[Shape, Shape]:
    """a and b of rank 2..4 whose batch dims broadcast (each side may drop or 1 a dim)."""
    batch = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))

    def side() -> Shape:
        keep = draw(st.integers(0, len(batch)))
        return tuple(d if draw(st.booleans()) else 1 for d in batch[len(batch) - keep :])

    m, n = draw(st.integers(1, max_mnk)), draw(st.integers(1, max_mnk))
    k = draw(st.one_of(st.integers(1, max_mnk), st.integers(50, 130)))
    return (*side(), m, k), (*side(), k, n)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shapes=matmul_shapes(),
    dtype=st.sampled_from(DTYPES),
    exact=st.booleans(),
    layout=st.sampled_from(LAYOUTS),
    seed=st.integers(0, 2**32 - 1),
)
def test_generated_against_torch(shapes: tuple[Shape, Shape], dtype: str, exact: bool, layout: str, seed: int) -> None:
    pytest.importorskip("torch")
    check_against_torch(*shapes, dtype, exact, layout, seed)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shapes=matmul_shapes(max_mnk=4), seed=st.integers(0, 2**32 - 1))
def test_generated_against_triple_loop(shapes: tuple[Shape, Shape], seed: int) -> None:
    rng = np.random.default_rng(seed)
    a_shape, b_shape = shapes
    if a_shape[-1] > 8:
        a_shape, b_shape = (*a_shape[:-1], 8), (*b_shape[:-2], 8, b_shape[-1])
    a = random_values(rng, a_shape, "bfloat16", exact=True)
    b = random_values(rng, b_shape, "bfloat16", exact=True)
    got = run_reference(a, b, "bfloat16", "padded")
    assert_rounded_equal(got, brute_matmul(a, b), "bfloat16", 0, f"{a_shape}@{b_shape}")


def _wrapped_python_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Exact integer a @ b in Python ints, wrapped to int64 as two's complement arithmetic wraps."""
    exact = np.matmul(a.astype(object), b.astype(object))
    wrap = np.vectorize(lambda v: ((int(v) + 2**63) % 2**64) - 2**63, otypes=[object])
    return wrap(exact).astype(np.int64)


@pytest.mark.parametrize(
    ("low", "high", "k"),
    [(-128, 127, 7), (0, 255, 64), (-(2**31), 2**31 - 1, 33), (-(2**62), 2**62, 5), (-(2**63), 2**63 - 1, 9)],
)
def test_integer_matmul_is_exact_and_wraps_like_int64(low: int, high: int, k: int) -> None:
    from sigdnn.plan_builders.reference.matmul import integer_matmul

    rng = np.random.default_rng(k)
    a = rng.integers(low, high, (2, 3, k), dtype=np.int64, endpoint=True)
    b = rng.integers(low, high, (k, 4), dtype=np.int64, endpoint=True)
    a[0, 0, 0], b[0, 0] = high, high  # the extremes, so products reach the top of the range
    np.testing.assert_array_equal(integer_matmul(a, b), _wrapped_python_matmul(a, b))


def test_integer_matmul_above_float64_precision_through_the_executor() -> None:
    """2^40-sized int64 operands: float64 would lose the low bits; the reference must not."""
    g = sigdnn.Graph("imm", io_dtype="int64", compute_dtype="int64")
    g.matmul(g.tensor("a", (3, 4)), g.tensor("b", (4, 2)), name="mm").set_output(True).set_name("c")
    rng = np.random.default_rng(5)
    a = rng.integers(2**40, 2**41, (3, 4), dtype=np.int64)
    b = rng.integers(-(2**20), 2**20, (4, 2), dtype=np.int64)
    got = sigdnn.Executor().run(g, {"a": a, "b": b})["c"]
    np.testing.assert_array_equal(got, _wrapped_python_matmul(a, b))
    assert not np.array_equal(got, (a.astype(np.float64) @ b.astype(np.float64)).astype(np.int64))
