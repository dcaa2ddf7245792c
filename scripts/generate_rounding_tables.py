"""Correctly rounded float16 / bfloat16 results of the unary forward math modes, for every input.

    python scripts/generate_rounding_tables.py     # writes tests/plan_builders/reference/data/rounding_tables.npz

For each mode and each 16-bit format, every one of the 65,536 input bit
patterns is evaluated with mpmath at 60 significant digits and rounded to
the format (nearest, ties to even) in exact arithmetic: the value's nearest
float64 locates it among the format's midpoints (all exact in float64), and
where that float64 is a midpoint, the sign of the 60-digit residual decides.
No rounding code of sigdnn is used, nor a float64 -> bfloat16 cast (ml_dtypes
goes through float32: two roundings). Stored as uint16 bit patterns, one
array per "<dtype>/<mode>", difference-coded (``np.cumsum(stored, dtype=np.uint16)``
decodes), with np.savez_compressed (a few hundred KB).

Conventions beyond the real value: a result outside the domain is NaN (any
payload); one too large rounds to +-inf; a result that is exactly zero takes
the sign IEEE 754 gives the corresponding operation on x (x's sign for the
odd functions, ceil and floor; + for abs and for relu, whose lower clip 0 is
what it returns below it; the opposite of x's for neg), and a nonzero result
that rounds to zero keeps its own sign. Inputs that are NaN or +-inf are not
evaluated (their entries hold NaN): tests check the finite inputs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import ml_dtypes
import mpmath
import numpy as np

mp = mpmath.mp
mp.dps = 60

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "plan_builders" / "reference" / "data" / "rounding_tables.npz"
FORMATS = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}
GELU_C = mpmath.mpf("0.044715")  # the constant as written in the definition, exactly
NAN = {"float16": 0x7E00, "bfloat16": 0x7FC0}

# mode -> f(x) over mpf, None outside the domain. Written from OPS.md's definitions, in forms that
# do not cancel at 60 digits (erfc for the gelu tail, x / (1 + e^-2u) for 1 + tanh u).
MODES: dict[str, Callable] = {
    "abs": lambda x: abs(x),
    "neg": lambda x: -x,
    "ceil": mpmath.ceil,
    "floor": mpmath.floor,
    "identity": lambda x: x,
    "sqrt": lambda x: mpmath.sqrt(x) if x >= 0 else None,
    "rsqrt": lambda x: (mpmath.inf if x == 0 else 1 / mpmath.sqrt(x)) if x >= 0 else None,
    "reciprocal": lambda x: mpmath.inf if x == 0 else 1 / x,
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
    "gelu_approx_tanh_fwd": lambda x: x / (1 + mpmath.exp(-2 * mpmath.sqrt(2 / mpmath.pi) * (x + GELU_C * x**3))),
    "softplus_fwd": lambda x: mpmath.log1p(mpmath.exp(x)),
    "swish_fwd": lambda x: x / (1 + mpmath.exp(-x)),
}
# The sign of an exactly zero result, from x's sign bit (True: negative): IEEE 754's for each operation.
ZERO_SIGN: dict[str, Callable[[bool], bool]] = {
    "abs": lambda negative: False,
    "neg": lambda negative: not negative,
    "relu_fwd": lambda negative: False,
}
# 1 / +-0 and rsqrt(+-0) are +-inf with the zero's sign (IEEE 754 division / rSqrt).
SIGNED_INFINITY = {"reciprocal", "rsqrt"}


def grid(dtype: np.dtype) -> tuple[np.ndarray, float]:
    """The midpoints between consecutive non-negative finite values (index i: between bits i and i+1), and
    the overflow threshold. Every one is exact in float64; a bit pattern's index is its value's rank."""
    bits = np.arange(0x8000, dtype=np.uint16)
    with np.errstate(invalid="ignore"):  # the NaN patterns
        values = bits.view(dtype).astype(np.float64)
    finite = values[np.isfinite(values)]
    assert np.all(np.diff(finite) > 0)
    mids = (finite[:-1] + finite[1:]) / 2
    overflow = finite[-1] + (finite[-1] - finite[-2]) / 2
    return mids, overflow


def round_to_bits(values: list, negative_x: np.ndarray, mode: str, name: str) -> np.ndarray:
    """Nearest-even 16-bit patterns of exact values (None: NaN)."""
    mids, overflow = grid(FORMATS[name])
    n = len(values)
    nearest = np.zeros(n)  # |value| rounded to float64
    residual = np.zeros(n, np.int8)  # sign of |value| - nearest
    negative = np.zeros(n, bool)
    nan = np.zeros(n, bool)
    huge = np.zeros(n, bool)
    for i, v in enumerate(values):
        if v is None:
            nan[i] = True
            continue
        if v == 0:
            negative[i] = ZERO_SIGN.get(mode, lambda neg: neg)(bool(negative_x[i]))
            continue
        negative[i] = v < 0
        a = abs(v)
        if a >= overflow:  # ties at the threshold go to inf too: the largest finite value is odd
            huge[i] = True
            continue
        f = float(a)
        nearest[i] = f
        residual[i] = (a > f) - (a < f)
    index = np.searchsorted(mids, nearest, side="left")  # mids below `nearest`
    tie = (index < len(mids)) & (mids[np.minimum(index, len(mids) - 1)] == nearest)
    up = tie & ((residual > 0) | ((residual == 0) & (index % 2 == 1)))  # to the odd side's even neighbour
    bits = (index + up).astype(np.uint16)
    bits[huge] = np.uint16(len(mids) + 1)  # the pattern after the largest finite value: inf
    bits[negative] |= np.uint16(0x8000)
    bits[nan] = NAN[name]
    return bits


def table(mode: str, name: str) -> np.ndarray:
    dtype = FORMATS[name]
    patterns = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    with np.errstate(invalid="ignore"):  # the NaN patterns
        xs = patterns.view(dtype).astype(np.float64)
    finite = np.isfinite(xs)
    f = MODES[mode]
    values: list = []
    for x, ok in zip(xs.tolist(), finite.tolist()):
        if not ok:
            values.append(None)
        elif mode in SIGNED_INFINITY and x == 0:
            values.append(mpmath.inf if np.copysign(1.0, x) > 0 else -mpmath.inf)
        else:
            values.append(f(mpmath.mpf(x)))
    return round_to_bits(values, (patterns & 0x8000) != 0, mode, name)


def main() -> int:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tables = {}
    for name in FORMATS:
        for mode in MODES:
            tables[f"{name}/{mode}"] = table(mode, name)
            print(f"{name} {mode}", flush=True)
    # Stored as differences of consecutive entries (mod 2**16): outputs change little from one input
    # pattern to the next, so the differences compress ~9x better (330 KB instead of 2.9 MB).
    np.savez_compressed(OUT, **{key: np.diff(bits, prepend=np.uint16(0)) for key, bits in tables.items()})
    print(f"wrote {OUT.relative_to(ROOT)} ({OUT.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
