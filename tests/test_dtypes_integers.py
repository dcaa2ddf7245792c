"""Data types: names, NumPy dtypes and wire values as input; float -> integer stores at the edges of the range."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from sigdnn.dtypes import DataType, as_data_type, from_wire, round_to

# (enum, long name, short name, NumPy dtype, wire value, itemsize, float, integer): written out, not derived.
TABLE = [
    (DataType.FLOAT32, "float32", "f32", np.float32, 1, 4, True, False),
    (DataType.FLOAT16, "float16", "f16", np.float16, 2, 2, True, False),
    (DataType.BFLOAT16, "bfloat16", "bf16", ml_dtypes.bfloat16, 3, 2, True, False),
    (DataType.FLOAT64, "float64", "f64", np.float64, 4, 8, True, False),
    (DataType.FP8_E4M3, "fp8_e4m3", "e4m3", ml_dtypes.float8_e4m3fn, 5, 1, True, False),
    (DataType.FP8_E5M2, "fp8_e5m2", "e5m2", ml_dtypes.float8_e5m2, 6, 1, True, False),
    (DataType.INT8, "int8", "i8", np.int8, 7, 1, False, True),
    (DataType.UINT8, "uint8", "u8", np.uint8, 8, 1, False, True),
    (DataType.INT32, "int32", "i32", np.int32, 9, 4, False, True),
    (DataType.INT64, "int64", "i64", np.int64, 10, 8, False, True),
    (DataType.BOOL, "bool", "bool", np.bool_, 11, 1, False, False),
]


@pytest.mark.parametrize("row", TABLE, ids=[r[1] for r in TABLE])
def test_every_spelling_of_every_dtype(row) -> None:
    dt, name, short, np_type, wire, itemsize, is_float, is_integer = row
    assert dt.value == name and str(dt) == name and dt.short == short
    assert dt.numpy == np.dtype(np_type) and dt.itemsize == itemsize
    assert (dt.is_float, dt.is_integer) == (is_float, is_integer)
    assert dt.wire == wire and from_wire(wire) is dt
    # "i8" / "u8" are refused as ambiguous (NumPy reads them as 64-bit): tests/test_dtypes.py checks that.
    shorts = () if short in ("i8", "u8") else (short, short.upper())
    for spelling in (dt, name, name.upper(), np.dtype(np_type), np_type, *shorts):
        assert as_data_type(spelling) is dt


def test_unset_and_unknown_wire_values() -> None:
    assert from_wire(0) is None
    with pytest.raises(KeyError):
        from_wire(12)


@pytest.mark.parametrize("bad", ["floaty", "f9", "", "i3", "int4", np.complex64, np.dtype("U3"), 3, [1]])
def test_unknown_names_and_types_are_a_value_error_naming_them(bad) -> None:
    with pytest.raises(ValueError, match=r"unknown data type|has no sigdnn data type|is not a data type") as info:
        as_data_type(bad)
    assert repr(bad) in str(info.value)


# Float -> integer: truncate toward zero; NaN and +-inf give 0; finite values out of range clip to the range.
EDGES = [math.nan, math.inf, -math.inf, 1e300, -1e300, 2.0**63, -(2.0**63), 2.0**64, 2.0**31, -(2.0**31) - 1, 256.0]


@pytest.mark.parametrize("dtype", [DataType.INT8, DataType.UINT8, DataType.INT32, DataType.INT64], ids=str)
def test_float_to_integer_at_and_past_the_range(dtype: DataType) -> None:
    info = np.iinfo(dtype.numpy)

    def want(v: float) -> int:
        return 0 if not math.isfinite(v) else max(info.min, min(info.max, math.trunc(v)))

    got = round_to(np.array(EDGES), dtype)
    assert got.dtype == dtype.numpy
    assert got.tolist() == [want(v) for v in EDGES]
    near = [float(info.max), float(info.max) - 0.5, float(info.min) - 0.75, float(info.min) + 0.5]
    assert round_to(np.array(near), dtype).tolist() == [want(v) for v in near]


def test_scalar_and_integer_inputs_keep_their_values() -> None:
    assert round_to(np.float64(-3.75), DataType.INT32).item() == -3
    assert round_to(np.array([2**62 + 1, -5]), DataType.INT64).tolist() == [2**62 + 1, -5]
    assert round_to(np.array([300, -1]), DataType.INT32).tolist() == [300, -1]
