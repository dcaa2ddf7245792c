"""reshape, transpose, slice and concatenate: exact copies for every dtype, one rounding across dtypes.

Oracles: NumPy indexing (reshape in C order, transpose, basic slicing,
concatenate) on the same values; int64 beyond 2**53 and NaN payloads must
come through bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from graph_runs import outputs

import sigdnn

BIG = 2**62 + 12345  # not representable in float64


def run(g: sigdnn.Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return sigdnn.Executor().run(sigdnn.deserialize(g.serialize()), inputs)


@pytest.mark.parametrize("dtype", ["int64", "float16", "bfloat16", "int8", "bool"])
def test_each_op_copies_exactly(dtype: str) -> None:
    numpy_dtype = sigdnn.DataType(dtype).numpy
    rng = np.random.default_rng(0)
    x = rng.integers(-100, 100, size=(3, 4, 5)).astype(numpy_dtype)
    if dtype == "int64":
        x[0, 0, 0] = BIG
    strided = np.moveaxis(np.ascontiguousarray(np.moveaxis(x, 1, -1)), -1, 1)  # logical x, stored channels-last
    g = sigdnn.Graph("move", io_dtype=dtype)
    xt, zt = g.tensor("x", x.shape), g.tensor("z", (3, 2, 5))
    outputs(
        g,
        {
            "reshaped": g.reshape(xt, (12, 5), name="reshape"),
            "transposed": g.transpose(xt, (2, 0, 1), name="transpose"),
            "sliced": g.slice(xt, [slice(1, None), slice(None, None, 2), slice(1, 5, 3)], name="slice"),
            "joined": g.concatenate([xt, zt, xt], axis=-2, name="concatenate"),
        },
    )
    z = rng.integers(-5, 5, size=(3, 2, 5)).astype(numpy_dtype)
    got = run(g, {"x": strided, "z": z})
    np.testing.assert_array_equal(got["reshaped"], x.reshape(12, 5))
    np.testing.assert_array_equal(got["transposed"], x.transpose(2, 0, 1))
    np.testing.assert_array_equal(got["sliced"], x[1:, ::2, 1:5:3])
    np.testing.assert_array_equal(got["joined"], np.concatenate([x, z, x], axis=1))
    if dtype == "int64":
        assert int(got["reshaped"][0, 0]) == BIG and int(got["transposed"][0, 0, 0]) == BIG


def test_nan_payload_survives() -> None:
    x = np.array([1.0, np.nan, 3.0], dtype=np.float32)
    x.view(np.uint32)[1] = 0x7FC00123  # a NaN with a payload
    g = sigdnn.Graph("move", io_dtype="float32")
    outputs(g, {"y": g.transpose(g.tensor("x", (3,)), (0,))})
    assert run(g, {"x": x})["y"].view(np.uint32)[1] == 0x7FC00123


def test_dtype_change_rounds_once() -> None:
    """int64 -> float16 and float32 -> int32 through a reshape: one rounding of the exact value."""
    g = sigdnn.Graph("move", io_dtype="int64")
    a = g.tensor("a", (4,))
    b = g.tensor("b", (2, 2), dtype="float32")
    outputs(g, {"h": g.reshape(a, (2, 2)).set_data_type("float16"), "i": g.reshape(b, (4,)).set_data_type("int32")})
    values = np.array([2049, 2051, -65519, 70000], dtype=np.int64)  # ties to even / overflow in float16
    floats = np.array([[1.9, -2.7], [3.5, -0.5]], dtype=np.float32)
    got = run(g, {"a": values, "b": floats})
    np.testing.assert_array_equal(got["h"].ravel(), np.array([2048, 2052, -65504, np.inf], dtype=np.float16))
    np.testing.assert_array_equal(got["i"], np.array([1, -2, 3, 0], dtype=np.int32))  # truncation toward zero


def test_float_to_float_and_wide_integers_round_once() -> None:
    """float32 -> float16 keeps fractions; an int64 past 2**53 rounds to float32 from its exact value.

    2**60 + 2**36 + 1 lies just above the midpoint of float32's neighbours 2**60 and 2**60 + 2**37:
    it rounds up. Through float64 first it would become the midpoint itself (float64's spacing there is
    2**8) and then round to even, down to 2**60.
    """
    g = sigdnn.Graph("move", io_dtype="float32")
    a = g.tensor("a", (2,))
    b = g.tensor("b", (2,), dtype="int64")
    outputs(g, {"h": g.reshape(a, (2,)).set_data_type("float16"), "f": g.reshape(b, (2,)).set_data_type("float32")})
    wide = np.array([2**60 + 2**36 + 1, -(2**60 + 2**36 + 1)], dtype=np.int64)
    got = run(g, {"a": np.array([1.5, -2.25], np.float32), "b": wide})
    np.testing.assert_array_equal(got["h"], np.array([1.5, -2.25], np.float16))
    np.testing.assert_array_equal(got["f"], np.array([2**60 + 2**37, -(2**60 + 2**37)], np.float32))
