"""GPU reference data movement (gpu_reference/movement.py) into an output of another dtype, on the emulator:
each element read exactly and rounded once. Oracle: NumPy's rounding of the exact (float64) value."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_reference_emulation import make_available, run_both

import sigdnn


@pytest.fixture(autouse=True)
def _available(monkeypatch: pytest.MonkeyPatch) -> None:
    make_available(monkeypatch)


def test_floats_moved_into_a_narrower_float_keep_their_fractions() -> None:
    """float32 -> float16 through a transpose: 1.5 stays 1.5, 65520 rounds to inf, NaN stays NaN (a read as
    integers would have truncated the fractions)."""
    g = sigdnn.Graph("tr", io_dtype="float32", compute_dtype="float32")
    g.transpose(g.tensor("x", (2, 3)), (1, 0), name="tr").set_output(True).set_data_type("float16")
    x = np.array([[1.5, -2.25, 65520.0], [np.nan, 0.1, -1e-8]], np.float32)
    got, cpu = run_both(g, {"x": x})
    with np.errstate(over="ignore"):
        want = x.T.astype(np.float64).astype(np.float16)
    assert want[0, 0] == 1.5 and np.isinf(want[2, 0])
    np.testing.assert_array_equal(got["tr::y"], want)
    np.testing.assert_array_equal(cpu["tr::y"], want)


def test_integers_moved_into_floats_and_floats_into_integers() -> None:
    """int32 -> float32 (16777217 rounds to 16777216) by a slice; float64 -> int32 by a reshape (truncated,
    saturated, NaN to 0)."""
    g = sigdnn.Graph("sl", io_dtype="int32", compute_dtype="int32")
    g.slice(g.tensor("x", (4,)), (slice(1, 4, 1),), name="sl").set_output(True).set_data_type("float32")
    x = np.array([9, 16777217, -3, 2**31 - 1], np.int32)
    got, _ = run_both(g, {"x": x})
    np.testing.assert_array_equal(got["sl::y"], np.array([16777216.0, -3.0, 2.0**31], np.float32))
    g = sigdnn.Graph("rs", io_dtype="float64", compute_dtype="float32")
    g.reshape(g.tensor("x", (2, 2)), (4,), name="rs").set_output(True).set_data_type("int32")
    got, _ = run_both(g, {"x": np.array([[1.5, -2.7], [np.nan, 1e10]])})
    np.testing.assert_array_equal(got["rs::y"], np.array([1, -2, 0, 2**31 - 1], np.int32))
