"""relu_fwd's one-pass form (np.maximum) against docs/ops.md's definition, bit for bit, signed zeros included.

docs/ops.md: x <= L -> L + s (x - L); x >= U -> U; else x. The oracle below is
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
