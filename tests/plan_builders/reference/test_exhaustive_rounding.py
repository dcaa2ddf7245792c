"""Every finite float16 and bfloat16 input of every unary forward math mode is correctly rounded.

The reference claims each forward math mode is correctly rounded (the
nearest value, ties to even, to a true value known to 60 digits). Here that
claim is checked on all 65,536 bit patterns of each 16-bit format, bit for
bit (signed zeros included, NaN payloads aside), against a table that
scripts/generate_rounding_tables.py computed with mpmath and rounded in
exact arithmetic; its docstring gives the conventions (signs of zero,
results outside the domain).
"""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import sigdnn

TABLES = Path(__file__).parent / "data" / "rounding_tables.npz"
FORMATS = {"float16": np.dtype(np.float16), "bfloat16": np.dtype(ml_dtypes.bfloat16)}


def _tables() -> dict[str, np.ndarray]:
    """The tables, decoded: each is stored as differences of consecutive entries (mod 2**16)."""
    with np.load(TABLES) as data:
        return {key: np.cumsum(data[key], dtype=np.uint16) for key in data.files}


EXPECTED = _tables()
CASES = sorted(EXPECTED)


def every_finite_input(dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(bit patterns, values) of every finite value of a 16-bit format."""
    patterns = np.arange(0x10000, dtype=np.uint32).astype(np.uint16)
    values = patterns.view(dtype)
    finite = np.isfinite(values.astype(np.float32))
    return patterns[finite], values[finite]


def reference(mode: str, x: np.ndarray, dtype_name: str) -> np.ndarray:
    g = sigdnn.Graph("m", io_dtype=dtype_name, compute_dtype="float32")
    g.pointwise(mode, g.tensor("x", x.shape), name="n").set_output(True).set_name("y")
    return sigdnn.Executor().run(g, {"x": x})["y"]


def test_the_tables_cover_every_unary_forward_math_mode() -> None:
    modes = {key.split("/")[1] for key in CASES}
    assert {key.split("/")[0] for key in CASES} == set(FORMATS)
    assert len(CASES) == 2 * len(modes) == 44
    assert {"exp", "log", "sin", "erf", "gelu_fwd", "gelu_approx_tanh_fwd", "swish_fwd", "softplus_fwd"} <= modes


@pytest.mark.parametrize("case", CASES)
def test_every_finite_input_is_correctly_rounded(case: str) -> None:
    dtype_name, mode = case.split("/")
    dtype = FORMATS[dtype_name]
    patterns, x = every_finite_input(dtype)
    got = reference(mode, x, dtype_name).view(np.uint16)
    want = EXPECTED[case][patterns]
    got_nan = np.isnan(got.view(dtype).astype(np.float32))
    want_nan = np.isnan(want.view(dtype).astype(np.float32))
    wrong = (got != want) & ~(got_nan & want_nan)
    if wrong.any():
        at = np.flatnonzero(wrong)[:5]
        show = [
            f"{mode}({float(x[i])!r}) = {float(got.view(dtype)[i])!r}, want {float(want.view(dtype)[i])!r}" for i in at
        ]
        pytest.fail(f"{wrong.sum()} of {len(x)} {dtype_name} inputs not correctly rounded: {show}")
