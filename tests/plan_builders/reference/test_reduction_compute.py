"""Which reductions of integers compute in int64 and which in float64 (reference.reduction's rule)."""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn

X = np.array([[1, 2], [3, 6], [3, 4]], np.int32)


@pytest.mark.parametrize(
    ("mode", "want"),
    [
        ("avg", [1, 4, 3]),  # 1.5, 4.5, 3.5: no exact integer result, so float64, then to int32 toward zero
        ("norm2", [2, 6, 5]),  # sqrt(5), sqrt(45), 5
        ("add", [3, 9, 7]),
        ("mul_no_zeros", [2, 18, 12]),
    ],
)
def test_integer_reductions_with_an_integer_compute_type(mode: str, want: list[int]) -> None:
    g = sigdnn.Graph("r", io_dtype="int32", compute_dtype="int32")
    g.reduction(g.tensor("x", (3, 2)), mode, (3, 1), name="red").set_output(True).set_name("y")
    assert sigdnn.Executor().run(g, {"x": X})["y"].ravel().tolist() == want


def test_boolean_inputs_are_counted() -> None:
    g = sigdnn.Graph("r", io_dtype="bool", compute_dtype="int32")
    y = g.reduction(g.tensor("x", (2, 3)), "add", (2, 1), name="red")
    y.set_data_type("int32").set_output(True).set_name("y")
    x = np.array([[True, True, False], [True, True, True]])
    assert sigdnn.Executor().run(g, {"x": x})["y"].ravel().tolist() == [2, 3]


def test_float_inputs_stay_float_with_an_integer_compute_type() -> None:
    """An integer compute type does not truncate float inputs: 0.5 + 0.75 is 1.25, not 0 + 0."""
    g = sigdnn.Graph("r", io_dtype="float32", compute_dtype="int32")
    g.reduction(g.tensor("x", (2, 2)), "add", (2, 1), name="red").set_output(True).set_name("y")
    x = np.array([[0.5, 0.75], [-1.5, 0.25]], np.float32)
    assert sigdnn.Executor().run(g, {"x": x})["y"].ravel().tolist() == [1.25, -1.25]
