"""integer_matmul at the edges of its two paths, against Python integers.

The float64 GEMM is taken only while every partial sum stays within 2**53;
the limb path cuts the operands so that each limb product's sum does too.
Each case sits where a looser bound would round: a sum just past 2**53 that
is odd, int64's minimum (whose magnitude NumPy's abs cannot hold), limbs
whose every bit is set.
"""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.plan_builders.reference.matmul import integer_matmul


def python_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a @ b in Python integers, wrapped to int64 as two's complement arithmetic wraps."""
    rows = [[sum(int(a[i, t]) * int(b[t, j]) for t in range(a.shape[1])) for j in range(b.shape[1])]
            for i in range(a.shape[0])]  # fmt: skip
    return np.array([[(v + 2**63) % 2**64 - 2**63 for v in row] for row in rows], dtype=np.int64)


def check(a: list[list[int]] | np.ndarray, b: list[list[int]] | np.ndarray) -> None:
    a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
    np.testing.assert_array_equal(integer_matmul(a, b), python_matmul(a, b))


def test_an_odd_sum_just_past_two_to_the_53() -> None:
    check([[2**53 + 1]], [[1]])  # one term: float64 would give 2**53
    check([[2**52 + 1, 2**52]], [[1], [1]])  # two terms below 2**53 whose sum is not
    check([[2**52 + 1, 2**52]], [[-1], [-1]])
    k = 16385  # odd terms of 2**40 + 2**21 + 1: each fits, their odd sum is past 2**54
    check(np.full((1, k), 2**20 + 1), np.full((k, 1), 2**20 + 1))


@pytest.mark.parametrize("side", ["a", "b"])
def test_int64_minimum_is_exact(side: str) -> None:
    low = np.array([[-(2**63), 1]], dtype=np.int64)
    ones = np.array([[1], [1]], dtype=np.int64)
    if side == "a":
        check(low, ones)  # -2**63 + 1: float64 would round it to -2**63
    else:
        check(ones.T, low.T)
    check(np.array([[-(2**63)]]), np.array([[-1]]))  # 2**63 wraps to -2**63


@pytest.mark.parametrize("k", [1, 2, 3, 33, 257, 4097])
def test_limbs_with_every_bit_set(k: int) -> None:
    """-1 has every bit set, so every limb holds its largest value; one large entry forces the limb path."""
    a = np.full((2, k), -1, dtype=np.int64)
    b = np.full((k, 2), -1, dtype=np.int64)
    a[0, 0] = 2**62 + 2**31 - 1
    b[-1, 1] = -(2**61) - 1
    check(a, b)


def test_an_integer_compute_type_over_one_float_input_computes_in_float64() -> None:
    """Only when both inputs are integers does the product stay int64; a float b is read as it is."""
    g = sigdnn.Graph("mixed", io_dtype="float32", compute_dtype="int32")
    a = g.tensor("a", (1, 2), dtype="int32")
    g.matmul(a, g.tensor("b", (2, 1)), name="mm").set_output(True).set_name("c")
    got = sigdnn.Executor().run(g, {"a": np.array([[3, -2]], np.int32), "b": np.array([[0.5], [1.25]], np.float32)})
    assert got["c"].tolist() == [[-1.0]]  # 3 * 0.5 - 2 * 1.25; truncated to integers it would be 3 * 0 - 2 * 1
