"""Which arithmetic the GPU reference's reduction (gpu_reference/reduction.py) sums in, told apart where int64
and float64 give different answers: integers past 2^53, an int64 sum that would wrap, float inputs under an
integer compute type. Oracles: NumPy int64 / float64 by hand, and the CPU reference."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_reference_emulation import make_available, run_both

import sigdnn


@pytest.fixture(autouse=True)
def _available(monkeypatch: pytest.MonkeyPatch) -> None:
    make_available(monkeypatch)


def reduce(mode: str, x: np.ndarray, io: str, compute: str, x_dtype: str | None = None) -> np.ndarray:
    g = sigdnn.Graph("red", io_dtype=io, compute_dtype=compute)
    t = g.tensor("x", x.shape)
    if x_dtype is not None:
        t.set_data_type(x_dtype)
    g.reduction(t, mode, axes=(1,), name="red").set_output(True)
    got, cpu = run_both(g, {"x": x})
    np.testing.assert_array_equal(cpu["red::y"], got["red::y"])
    return got["red::y"]


def test_integer_sums_are_exact_past_2_to_the_53() -> None:
    """int64 under int64 compute is summed in int64 (float64 would give 2^53 + 4) and is served, not declined."""
    x = np.array([[2**53 + 1, 2], [2**60 + 7, -3]], np.int64)
    assert reduce("add", x, "int64", "int64").tolist() == [[2**53 + 3], [2**60 + 4]]
    assert reduce("mul", np.array([[2**31 + 1, 2**31 - 1]], np.int64), "int64", "int64").tolist() == [[2**62 - 1]]


def test_the_average_is_taken_in_float64_even_under_integer_compute() -> None:
    """avg of two 2^62s: float64 gives 2^62; an int64 sum would wrap to -2^63 first."""
    assert reduce("avg", np.array([[2**62, 2**62]], np.int64), "int64", "int64").tolist() == [[2**62]]


def test_integers_under_a_float_compute_type_are_summed_in_float64() -> None:
    """2^53 + 1 reads as 2^53 in float64: the sum of two is 2^54, not 2^54 + 2."""
    x = np.array([[2**53 + 1, 2**53 + 1]], np.int64)
    assert reduce("add", x, "int64", "float32").tolist() == [[2**54]]


def test_a_float_input_under_integer_compute_is_summed_as_floats() -> None:
    """0.5 + 0.75 = 1.25, truncated to 1 in the int32 output (integer reads would give 0 + 0)."""
    x = np.array([[0.5, 0.75], [-0.5, 2.5]], np.float32)
    assert reduce("add", x, "int32", "int32", "float32").tolist() == [[1], [2]]
