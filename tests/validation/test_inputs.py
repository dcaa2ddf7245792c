"""random_inputs: reproducible, in each input's dtype and dims, over the documented ranges."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.inputs import random_array, random_inputs
from sigdnn.dtypes import DataType

N = 4096  # enough draws that every value of a small integer range appears (miss chance < 1e-200)


def draw(dtype: DataType, seed: int = 0) -> np.ndarray:
    return random_array(np.random.default_rng(seed), (N,), dtype)


@pytest.mark.parametrize(
    ("dtype", "low"), [(DataType.INT8, -8), (DataType.INT32, -8), (DataType.INT64, -8), (DataType.UINT8, 0)]
)
def test_integers_cover_exactly_their_small_range(dtype: DataType, low: int) -> None:
    values = draw(dtype)
    assert values.dtype == dtype.numpy
    assert set(np.unique(values).tolist()) == set(range(low, 9))


def test_booleans_are_both_values_about_half_the_time() -> None:
    values = draw(DataType.BOOL)
    assert values.dtype == np.bool_
    assert 0.45 < values.mean() < 0.55  # a fair coin: 4096 flips stay within 6 sigma of half


@pytest.mark.parametrize(("dtype", "numpy"), [(DataType.FLOAT32, np.float32), (DataType.BFLOAT16, ml_dtypes.bfloat16)])
def test_floats_fill_minus_two_to_two_and_are_representable(dtype: DataType, numpy: type) -> None:
    values = draw(dtype)
    assert values.dtype == np.dtype(numpy)
    as64 = values.astype(np.float64)
    assert as64.min() >= -2 and as64.max() <= 2
    assert as64.min() < -1.9 and as64.max() > 1.9  # the whole range, both signs
    assert np.array_equal(values.astype(np.float64).astype(numpy), values)


def test_inputs_are_one_per_graph_input_reproducible_by_seed_and_skippable() -> None:
    g = sigdnn.Graph("two", io_dtype="float16")
    a, b = g.tensor("a", (3, 5)), g.tensor("b", (5,), dtype="int32")
    g.pointwise("add", a, g.pointwise("identity", b, name="cast"), name="sum").set_output(True).set_name("y")
    first = random_inputs(g)
    assert sorted(first) == ["a", "b"]
    assert first["a"].shape == (3, 5) and first["a"].dtype == np.float16
    assert first["b"].shape == (5,) and first["b"].dtype == np.int32
    again = random_inputs(g, seed=0)
    assert all(np.array_equal(first[k], again[k]) for k in first)  # the default seed is 0
    other = random_inputs(g, seed=1)
    assert not np.array_equal(first["a"], other["a"])
    assert sorted(random_inputs(g, skip={"b"})) == ["a"]


def test_an_input_its_op_constrains_takes_the_ops_draw() -> None:
    """gdn's cu_seqlens: offsets from 0 to T, never decreasing (a uniform integer draw would be neither)."""
    g = sigdnn.Graph("gdn", io_dtype="float32", compute_dtype="float32")
    q, k, v = (g.tensor(n, (40, 2, 8)) for n in "qkv")
    gate, beta = g.tensor("g", (40, 2)), g.tensor("beta", (40, 2))
    cu = g.tensor("cu", (4,), dtype="int32")
    g.gdn(q, k, v, gate, beta, cu, None, name="n")[0].set_output(True)
    for seed in range(5):
        offsets = random_inputs(g, seed)["cu"]
        assert offsets[0] == 0 and offsets[-1] == 40 and np.all(np.diff(offsets) >= 0), offsets
