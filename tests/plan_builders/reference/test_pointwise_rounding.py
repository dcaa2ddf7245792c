"""Forward math modes are correctly rounded: within 0.5 ulp of a 60-digit mpmath value, ties to even.

The claim (the reference computes in float64 and rounds once) is tested at
its own strength: the result must be the one value whose rounding interval
holds the true value, checked against midpoints computed exactly from the
result's neighbours in the output format (no rounding code of the project
is used). Inputs: random bit patterns over each dtype's whole finite range
(subnormals, huge values, both signs) plus uniform values where the
activations bend; a fixed seed keeps the sample reproducible.
"""

from __future__ import annotations

from collections.abc import Callable

import ml_dtypes
import numpy as np
import pytest

import sigdnn

mpmath = pytest.importorskip("mpmath")
mp = mpmath.mp
# 60 digits, not 40: gelu / swish at a float32 subnormal x are x/2 (1 + O(x)), with x ~ 1e-45, and that
# O(x) decides which way the tie at x/2 rounds (tests/.../test_exhaustive_rounding.py: float16 / bfloat16).
DIGITS = 60  # set again in each test: other test modules change mpmath's global precision
mp.dps = DIGITS

UINT = {np.dtype(np.float16): np.uint16, np.dtype(ml_dtypes.bfloat16): np.uint16, np.dtype(np.float32): np.uint32}
GELU_C = mpmath.mpf("0.044715")  # the constant as written in the definition, exactly

EXACT: dict[str, Callable] = {
    "abs": lambda x: abs(x),
    "neg": lambda x: -x,
    "ceil": mpmath.ceil,
    "floor": mpmath.floor,
    "identity": lambda x: x,
    "sqrt": lambda x: mpmath.sqrt(x) if x >= 0 else None,
    "rsqrt": lambda x: 1 / mpmath.sqrt(x) if x > 0 else None,  # zeros: see SIGNED_ZERO
    "reciprocal": lambda x: 1 / x if x != 0 else None,
    "exp": mpmath.exp,
    "log": lambda x: (-mpmath.inf if x == 0 else mpmath.log(x)) if x >= 0 else None,
    "sin": mpmath.sin,
    "cos": mpmath.cos,
    "tan": mpmath.tan,
    "erf": mpmath.erf,
    "relu_fwd": lambda x: max(x, 0),
    "tanh_fwd": mpmath.tanh,
    "sigmoid_fwd": lambda x: 1 / (1 + mpmath.exp(-x)),
    "elu_fwd": lambda x: x if x > 0 else mpmath.expm1(x),
    "gelu_fwd": lambda x: x / 2 * mpmath.erfc(-x / mpmath.sqrt(2)),
    # x/2 (1 + tanh u) written as x / (1 + e^-2u): 1 + tanh u cancels even at 60 digits for x < -10.
    "gelu_approx_tanh_fwd": lambda x: x / (1 + mpmath.exp(-2 * mpmath.sqrt(2 / mpmath.pi) * (x + GELU_C * x**3))),
    "softplus_fwd": lambda x: mpmath.log1p(mpmath.exp(x)),
    "swish_fwd": lambda x: x / (1 + mpmath.exp(-x)),
}
# IEEE 754: 1 / +-0 and rsqrt(+-0) are +-inf, with the zero's sign.
SIGNED_ZERO = {"reciprocal", "rsqrt"}
DTYPES = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}


def sample(dtype: np.dtype, n: int = 160) -> np.ndarray:
    """Random finite values over the whole range (random bits) and over [-12, 12] (where activations bend)."""
    rng = np.random.default_rng(20261130)
    bits = rng.integers(0, np.iinfo(UINT[dtype]).max, size=4 * n, dtype=np.uint64).astype(UINT[dtype])
    anywhere = bits.view(dtype)
    with np.errstate(invalid="ignore"):  # NaN bit patterns, dropped here
        anywhere = anywhere[np.isfinite(anywhere.astype(np.float64))][:n]
    near = rng.uniform(-12, 12, n).astype(dtype)
    tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
    edges = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3 * tiny, -3 * tiny, 7 * tiny], dtype=dtype)
    return np.concatenate([anywhere, near, edges])


def from_bits(bits: int, dtype: np.dtype) -> float:
    return float(np.array([bits], UINT[dtype]).view(dtype)[0])


def rounding_interval(r: float, dtype: np.dtype) -> tuple[object, object, bool, bool]:
    """(low, high, low included, high included): the reals that round to ``r`` in ``dtype``, ties to even."""
    bits = int(np.array([r], dtype).view(UINT[dtype])[0])
    top = 1 << (8 * dtype.itemsize - 1)
    magnitude = bits & (top - 1)
    even = bits % 2 == 0
    if r == 0:
        tiny = mpmath.mpf(from_bits(1, dtype))
        return -tiny / 2, tiny / 2, True, True
    largest = float(ml_dtypes.finfo(dtype).max)
    below = mpmath.mpf(from_bits(magnitude - 1, dtype))
    overflow = (
        mpmath.mpf(largest) + (mpmath.mpf(largest) - mpmath.mpf(from_bits(magnitude_of(largest, dtype) - 1, dtype))) / 2
    )
    if abs(r) == np.inf:
        lo, hi, lo_in, hi_in = overflow, mpmath.inf, True, True
    else:
        above = mpmath.mpf(from_bits(magnitude + 1, dtype)) if abs(r) != largest else None
        lo = (below + mpmath.mpf(abs(r))) / 2
        hi = overflow if above is None else (mpmath.mpf(abs(r)) + above) / 2
        lo_in = hi_in = even
        if above is None:
            hi_in = False  # the overflow threshold itself rounds to inf (ties to even: max is odd)
    if r < 0:
        return -hi, -lo, hi_in, lo_in
    return lo, hi, lo_in, hi_in


def magnitude_of(value: float, dtype: np.dtype) -> int:
    return int(np.array([value], dtype).view(UINT[dtype])[0])


def correctly_rounded(r: float, true, dtype: np.dtype) -> bool:
    if true is None:  # outside the domain
        return bool(np.isnan(r))
    if np.isnan(r):
        return False
    lo, hi, lo_in, hi_in = rounding_interval(r, dtype)
    return (lo < true or (lo_in and lo == true)) and (true < hi or (hi_in and true == hi))


def reference(mode: str, x: np.ndarray, dtype_name: str) -> np.ndarray:
    g = sigdnn.Graph("m", io_dtype=dtype_name, compute_dtype="float32")
    g.pointwise(mode, g.tensor("x", x.shape), name="n").set_output(True).set_name("y")
    return sigdnn.Executor().run(g, {"x": x})["y"]


CASES = [(mode, dtype) for mode in EXACT for dtype in DTYPES]


@pytest.mark.parametrize(("mode", "dtype_name"), CASES)
def test_forward_math_modes_are_correctly_rounded(mode: str, dtype_name: str) -> None:
    mp.dps = DIGITS
    dtype = np.dtype(DTYPES[dtype_name])
    x = sample(dtype)
    got = reference(mode, x, dtype_name)
    wrong = []
    for xi, ri in zip(x.astype(np.float64), got.astype(np.float64)):
        if mode in SIGNED_ZERO and xi == 0:
            assert ri == np.copysign(np.inf, xi), (mode, xi, ri)
            continue
        true = EXACT[mode](mpmath.mpf(float(xi)))
        if not correctly_rounded(float(ri), true, dtype):
            wrong.append(f"{mode}({xi!r}) = {ri!r}, true {mpmath.nstr(true, 20) if true is not None else 'NaN'}")
    assert not wrong, f"{len(wrong)} of {len(x)} not correctly rounded: {wrong[:5]}"


@pytest.mark.parametrize(
    ("r", "true", "ok"),
    [
        (1.0, mpmath.mpf(1) + mpmath.mpf(2) ** -11, True),  # the tie between 1 and 1 + 2**-10 goes to even 1
        (1.0, mpmath.mpf(1) + mpmath.mpf(2) ** -11 + mpmath.mpf(2) ** -40, False),
        (1.0 + 2**-10, mpmath.mpf(1) + 3 * mpmath.mpf(2) ** -11, False),  # the tie goes to even 1 + 2**-9
        (65504.0, mpmath.mpf(65519), True),
        (float("inf"), mpmath.mpf(65520), True),  # 65520 is the overflow threshold
        (65504.0, mpmath.mpf(65520), False),
        (0.0, mpmath.mpf(2) ** -25, True),
        (2.0**-24, mpmath.mpf(2) ** -25 + mpmath.mpf(2) ** -60, True),
        (-(2.0**-24), -(mpmath.mpf(2) ** -25) - mpmath.mpf(2) ** -60, True),
        (-1.0, -(mpmath.mpf(1) + mpmath.mpf(2) ** -11), True),
        (float("nan"), None, True),
        (0.0, None, False),
    ],
)
def test_the_rounding_interval_oracle_itself(r: float, true, ok: bool) -> None:
    assert correctly_rounded(r, true, np.dtype(np.float16)) == ok


def reference64(mode: str, x: list[float], **params: float) -> np.ndarray:
    g = sigdnn.Graph("m", io_dtype="float64", compute_dtype="float64")
    g.pointwise(mode, g.tensor("x", (len(x),)), name="n", **params).set_output(True).set_name("y")
    return sigdnn.Executor().run(g, {"x": np.array(x, np.float64)})["y"]


@pytest.mark.parametrize(
    ("mode", "params", "x", "want"),
    [
        # f(x) = x minus less than half a float64 ulp of x: the float64 result is x itself.
        ("gelu_fwd", {}, [10.0, 0.0, -0.0], [10.0, 0.0, -0.0]),  # 10 Phi(10) = 10 - 7.6e-23
        ("gelu_approx_tanh_fwd", {}, [40.0, 0.0, -0.0], [40.0, 0.0, -0.0]),  # 40 sigma(4630)
        ("swish_fwd", {}, [40.0, 0.0, -0.0], [40.0, 0.0, -0.0]),  # 40 sigma(40) = 40 - 1.7e-16
        ("swish_fwd", {"swish_beta": 0.0}, [3.0, -5.0, -0.0], [1.5, -2.5, -0.0]),  # x sigma(0) = x / 2 exactly
        # elu at zeros is alpha expm1(+-0) = alpha * (+-0): with alpha < 0 the zero's sign flips.
        ("elu_fwd", {"elu_alpha": -0.5}, [-0.0, 0.0, 2.0], [0.0, -0.0, 2.0]),
    ],
)
def test_exact_float64_results_and_signed_zeros(mode: str, params: dict, x: list, want: list) -> None:
    """The sticky ulp that breaks x/2 ties (pointwise._off_the_half) moves only a float64 value equal to
    x/2 for x != 0 whose true value is not x/2: exact results, zeros and their signs stay as they are."""
    got = reference64(mode, x, **params)
    assert got.tolist() == want
    assert np.array_equal(np.signbit(got), np.signbit(np.array(want)))
