"""sigdnn.dtypes beyond round_to's arithmetic: rounder's dispatch, ml_dtypes loaded only when needed, what counts
as a torch dtype, how a bad value is shown, and huge values rounded without warnings.

Oracles: hand-worked roundings (a tie just broken by a bit float32 drops,
which rounding through float32 gets wrong), the ml_dtypes types themselves,
and strings counted by hand.
"""

from __future__ import annotations

import warnings

import ml_dtypes
import numpy as np
import pytest

from sigdnn import dtypes
from sigdnn.dtypes import DataType, DataTypeError, as_data_type, is_ml_dtypes, round_to, rounder


def test_rounder_matches_hand_worked_roundings() -> None:
    above_half_ulp = np.array([1 + 2.0**-24 + 2.0**-40])  # float32 ulp at 1 is 2^-23: just past the midpoint
    assert rounder(DataType.FLOAT32)(above_half_ulp).tolist() == [1 + 2.0**-23]
    assert rounder(DataType.FLOAT32)(above_half_ulp).dtype == np.float32
    assert rounder(DataType.FLOAT64)(np.array([0.1], np.float32)).tolist() == [float(np.float32(0.1))]
    assert rounder(DataType.FLOAT16)(np.array([2049, 2051], np.int64)).tolist() == [2048.0, 2052.0]  # ties to even
    # bfloat16 keeps 8 significant bits: 1 + 2^-8 is the midpoint of 1 and 1 + 2^-7, and 2^-30 breaks the tie up;
    # float32 drops that bit, so rounding through it ties and goes to even (1.0)
    assert rounder(DataType.BFLOAT16)(np.array([1 + 2.0**-8 + 2.0**-30])).astype(np.float64).tolist() == [1.0078125]
    assert rounder(DataType.INT8)(np.array([-2.7, 300.0])).tolist() == [-2, 127]  # toward zero, clipped
    assert rounder(DataType.BOOL)(np.array([0.0, -0.5])).tolist() == [False, True]


def test_is_ml_dtypes() -> None:
    assert is_ml_dtypes(np.dtype(ml_dtypes.bfloat16)) is True
    assert is_ml_dtypes(np.dtype(ml_dtypes.float8_e5m2)) is True
    assert is_ml_dtypes(np.dtype(np.float32)) is False


@pytest.fixture
def fresh_maps(monkeypatch: pytest.MonkeyPatch) -> None:
    """The dtype maps as a process starts them: NumPy's own types only, ml_dtypes' not yet loaded."""
    ml = set(dtypes._ML_DTYPES)
    monkeypatch.setattr(dtypes, "_NUMPY", {k: v for k, v in dtypes._NUMPY.items() if k not in ml})
    monkeypatch.setattr(dtypes, "_BY_NUMPY", {k: v for k, v in dtypes._BY_NUMPY.items() if v not in ml})


@pytest.mark.usefixtures("fresh_maps")
def test_a_bfloat16_tensor_loads_ml_dtypes_on_first_use() -> None:
    assert DataType.BFLOAT16.numpy == np.dtype(ml_dtypes.bfloat16)
    assert DataType.FP8_E4M3.itemsize == 1


@pytest.mark.usefixtures("fresh_maps")
def test_an_ml_dtypes_array_is_recognized_before_ml_dtypes_is_loaded() -> None:
    assert as_data_type(np.dtype(ml_dtypes.float8_e4m3fn)) is DataType.FP8_E4M3


@pytest.mark.usefixtures("fresh_maps")
def test_a_numpy_dtype_sigdnn_lacks_is_refused_without_loading_ml_dtypes() -> None:
    with pytest.raises(DataTypeError, match="has no sigdnn data type"):
        as_data_type(np.complex64)
    assert DataType.BFLOAT16 not in dtypes._NUMPY, "refusing complex64 loaded ml_dtypes"


def test_a_class_named_dtype_outside_torch_is_no_torch_dtype() -> None:
    dtype = type("dtype", (), {"__str__": lambda self: "torch.float32", "__module__": "mylib"})
    with pytest.raises(DataTypeError, match="is not a data type"):
        as_data_type(dtype())


def test_bad_values_are_shown_on_one_line_and_at_most_80_characters() -> None:
    class Long:
        def __init__(self, text: str) -> None:
            self.text = text

        def __repr__(self) -> str:
            return self.text

    for text, shown in [
        ("a\nb", "a b"),
        ("x" * 80, "x" * 80),
        ("x" * 81, "x" * 77 + "..."),
    ]:
        with pytest.raises(DataTypeError) as caught:
            as_data_type(Long(text))
        assert str(caught.value).startswith(f"{shown} is not a data type"), str(caught.value)


@pytest.mark.parametrize("dtype", [DataType.BFLOAT16, DataType.FP8_E4M3, DataType.FP8_E5M2])
def test_values_past_float32s_range_round_without_warnings(dtype: DataType) -> None:
    """5e38 and 1e300 lie past float32's largest finite value (about 3.4e38): they overflow (inf, or NaN for e4m3,
    which has no infinity) and say nothing on the way."""
    x = np.array([5e38, -5e38, 1e300, 3e38])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = round_to(x, dtype).astype(np.float64)
    if dtype is DataType.FP8_E4M3:
        assert np.isnan(got).all()
    else:
        assert got[:3].tolist() == [np.inf, -np.inf, np.inf]
        assert got[3] == (np.inf if dtype is DataType.FP8_E5M2 else float(ml_dtypes.bfloat16(3e38)))


@pytest.mark.parametrize("dtype", [DataType.FLOAT32, DataType.FLOAT16])
def test_rounder_overflows_to_inf_without_a_warning_as_round_to_does(dtype: DataType) -> None:
    x = np.array([1e39, -1e300, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = rounder(dtype)(x)
        assert got.tolist() == round_to(x, dtype).tolist() == [np.inf, -np.inf, 1.0]


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("u8", "sigdnn's short name u8 is uint8, NumPy's 'u8' is uint64: say 'uint8'"),
        ("i8", "sigdnn's short name i8 is int8, NumPy's 'i8' is int64: say 'int8' or 'int64'"),
    ],
)
def test_an_ambiguous_short_name_says_why(name: str, why: str) -> None:
    with pytest.raises(DataTypeError) as caught:
        as_data_type(name)
    assert str(caught.value) == f"data type {name!r} is ambiguous: {why}"
