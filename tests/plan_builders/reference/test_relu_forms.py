"""relu_fwd's one-pass form (np.maximum) against OPS.md's definition, bit for bit, signed zeros included.

OPS.md: x <= L -> L + s (x - L); x >= U -> U; else x. The oracle below is
that definition evaluated element by element in Python floats.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sigdnn

X = [-math.inf, -3.0, -0.5, -0.0, 0.0, 0.25, 0.5, 1.0, 7.0, math.inf, math.nan]


def definition(x: float, lo: float, hi: float, slope: float) -> float:
    if x <= lo:
        return lo if slope == 0 else lo + slope * (x - lo)
    return hi if x >= hi else x


@pytest.mark.parametrize("slope", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("lo", [0.0, -0.0, 0.5, -1.0, -math.inf, math.nan])
@pytest.mark.parametrize("hi", [math.inf, 4.0])
def test_relu_fwd_is_the_definition(lo: float, hi: float, slope: float) -> None:
    g = sigdnn.Graph("relu", io_dtype="float64")
    params = {"relu_lower_clip": lo, "relu_upper_clip": hi, "relu_lower_clip_slope": slope}
    g.pointwise("relu_fwd", g.tensor("x", (len(X),)), name="relu", **params).set_output(True).set_name("y")
    got = sigdnn.Executor().run(g, {"x": np.array(X)})["y"]
    want = np.array([definition(x, lo, hi, slope) for x in X])
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))  # -0.0 vs +0.0 too


def _float16_patterns() -> np.ndarray:
    return np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)


def _random_patterns(uint: type, count: int = 1 << 18) -> np.ndarray:
    """Random bit patterns of a float type (NaN payloads, subnormals, both zeros, infinities)."""
    bits = np.random.default_rng(5).integers(0, np.iinfo(uint).max, count, dtype=uint, endpoint=True)
    return bits.view(np.float32 if uint is np.uint32 else np.float64)


@pytest.mark.parametrize(
    ("dtype", "x"),
    [
        ("float16", np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)),  # every float16
        ("float64", _random_patterns(np.uint64)),  # these two take the float64 path
        ("float32", _random_patterns(np.uint32)),
    ],
)
@pytest.mark.parametrize("lo", [0.0, 0.5, -1.0, -math.inf, 1e-30])
def test_relu_fwd_on_the_input_dtype_has_the_bits_of_the_float64_path(dtype: str, x: np.ndarray, lo: float) -> None:
    """relu_fwd = max(x, lo) taken on x's own dtype (no widening, no rounding) where that is exact,
    against widening, max in float64 and one rounding, every bit (1e-30 is no float16 value: float16
    then takes the float64 path)."""
    from sigdnn.plan_builders.reference.pointwise import select_floor

    g = sigdnn.Graph("relu", io_dtype=dtype)
    g.pointwise("relu_fwd", g.tensor("x", x.shape), name="relu", relu_lower_clip=lo).set_output(True).set_name("y")
    selects = dtype == "float16" and float(np.array(lo, dtype=dtype)) == lo
    assert (select_floor(g.node_by_name("relu"), g) is not None) == selects
    got = sigdnn.Executor().run(g, {"x": x})["y"]
    with np.errstate(invalid="ignore"):
        want = np.maximum(x.astype(np.float64), lo).astype(dtype)
    uint = {"float16": np.uint16, "float32": np.uint32, "float64": np.uint64}[dtype]
    np.testing.assert_array_equal(got.view(uint), want.view(uint))
