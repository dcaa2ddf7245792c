"""Data types: the wire enum, NumPy dtypes, short names and exact rounding.

The reference computes in float64 and rounds once to each tensor's declared
dtype. NumPy rounds float64 to float16 directly, but ml_dtypes goes through
float32 for bfloat16 and fp8, which double-rounds ties. We round float64 to
float32 with round-to-odd first: float32 keeps enough extra bits that the
final round-to-nearest-even is then exact. Integer results (int64 from
integer compute) reach float32 and narrower the same way, rounded to odd in
float64 first: int64 -> float32 -> bfloat16 would double-round too.
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from sigdnn.schemas.DataType import DataType as _Wire


class DataType(enum.Enum):
    """A tensor element type, named as in the frontend (``"float16"``)."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"
    FLOAT64 = "float64"
    FP8_E4M3 = "fp8_e4m3"
    FP8_E5M2 = "fp8_e5m2"
    INT8 = "int8"
    UINT8 = "uint8"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"

    @property
    def wire(self) -> int:
        return getattr(_Wire, self.name)

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self]

    @property
    def itemsize(self) -> int:
        return _NUMPY[self].itemsize

    @property
    def short(self) -> str:
        return _SHORT[self]

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_integer(self) -> bool:
        return self in _INTEGERS

    def __str__(self) -> str:
        return self.value


_NUMPY: dict[DataType, np.dtype] = {
    DataType.FLOAT32: np.dtype(np.float32),
    DataType.FLOAT16: np.dtype(np.float16),
    DataType.BFLOAT16: np.dtype(ml_dtypes.bfloat16),
    DataType.FLOAT64: np.dtype(np.float64),
    DataType.FP8_E4M3: np.dtype(ml_dtypes.float8_e4m3fn),
    DataType.FP8_E5M2: np.dtype(ml_dtypes.float8_e5m2),
    DataType.INT8: np.dtype(np.int8),
    DataType.UINT8: np.dtype(np.uint8),
    DataType.INT32: np.dtype(np.int32),
    DataType.INT64: np.dtype(np.int64),
    DataType.BOOL: np.dtype(np.bool_),
}
_SHORT = {
    DataType.FLOAT32: "f32",
    DataType.FLOAT16: "f16",
    DataType.BFLOAT16: "bf16",
    DataType.FLOAT64: "f64",
    DataType.FP8_E4M3: "e4m3",
    DataType.FP8_E5M2: "e5m2",
    DataType.INT8: "i8",
    DataType.UINT8: "u8",
    DataType.INT32: "i32",
    DataType.INT64: "i64",
    DataType.BOOL: "bool",
}
_FLOATS = frozenset(
    {
        DataType.FLOAT32,
        DataType.FLOAT16,
        DataType.BFLOAT16,
        DataType.FLOAT64,
        DataType.FP8_E4M3,
        DataType.FP8_E5M2,
    }
)
_INTEGERS = frozenset({DataType.INT8, DataType.UINT8, DataType.INT32, DataType.INT64})
_BY_WIRE = {dt.wire: dt for dt in DataType}
_BY_NAME: dict[str, DataType] = {}
for _dt in DataType:
    _BY_NAME[_dt.value] = _dt
    _BY_NAME[_SHORT[_dt]] = _dt
_BY_NUMPY = {v: k for k, v in _NUMPY.items()}


def as_data_type(value: DataType | str | np.dtype | type) -> DataType:
    """Accept a DataType, a name ("float16", "f16") or a NumPy dtype."""
    if isinstance(value, DataType):
        return value
    if isinstance(value, str) and value.lower() in _BY_NAME:
        return _BY_NAME[value.lower()]
    try:
        return _BY_NUMPY[np.dtype(value)]
    except (TypeError, KeyError):
        raise ValueError(f"unknown data type {value!r}") from None


def from_wire(value: int) -> DataType | None:
    """The DataType of a wire enum value; None for UNSET; KeyError if unknown."""
    if value == _Wire.UNSET:
        return None
    return _BY_WIRE[value]


def _float64_to_float32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """Round float64 to float32 so that a later narrower rounding is exact."""
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = x.astype(np.float32)
        overshoot = np.abs(nearest.astype(np.float64)) > np.abs(x)
    truncated = np.where(overshoot, np.nextafter(nearest, np.float32(0)), nearest).astype(np.float32)
    with np.errstate(invalid="ignore"):
        inexact = truncated.astype(np.float64) != x
    inexact &= np.isfinite(x)
    bits = truncated.view(np.uint32)
    return np.where(inexact, bits | np.uint32(1), bits).view(np.float32)


def _int64_to_float64_round_to_odd(x: np.ndarray) -> np.ndarray:
    """Integers to float64, rounded to odd so a later narrower rounding is exact.

    int64 has 63 significant bits, float64 53: a plain cast rounds to nearest
    and a second rounding (to float32, bfloat16, ...) may then double-round.
    Split x = hi + lo, both exact in float64, and recover the cast's error
    exactly with TwoSum.
    """
    x = x.astype(np.int64)
    lo = x & np.int64(0xFFFFFFFF)  # 0 <= lo < 2**32
    hi = (x - lo).astype(np.float64)  # a multiple of 2**32 with <= 31 significant bits: exact
    lo = lo.astype(np.float64)
    s = hi + lo
    b = s - hi
    err = (hi - (s - b)) + (lo - b)  # s + err == x exactly
    overshoot = (err != 0) & ((err < 0) == (s > 0))
    truncated = np.where(overshoot, np.nextafter(s, 0.0), s)
    bits = truncated.view(np.uint64)
    return np.where(err != 0, bits | np.uint64(1), bits).view(np.float64)


def round_to(x: np.ndarray, dtype: DataType) -> np.ndarray:
    """Round a float64 (or int64 / bool) array to ``dtype`` exactly once.

    Floats round to nearest even, overflowing to inf where the format has
    one (fp8 e4m3 has none: past 464 it gives NaN, as ml_dtypes does; 464
    itself ties to 448); a float stored in an integer dtype truncates toward
    zero as a C cast does (out of range and NaN are undefined: clipped, 0);
    bool is "nonzero". tests/test_dtypes.py holds the worked cases.
    """
    x = np.asarray(x)
    target = dtype.numpy
    if dtype is DataType.BOOL:
        return x != 0
    if dtype.is_float and dtype is not DataType.FLOAT64 and x.dtype.kind in "iu":
        x = _int64_to_float64_round_to_odd(x)
    if dtype in (DataType.BFLOAT16, DataType.FP8_E4M3, DataType.FP8_E5M2):
        if x.dtype == np.float64:
            x = _float64_to_float32_round_to_odd(x)
        return x.astype(target)
    if dtype.is_integer and x.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            x = np.trunc(x)
            x = np.where(np.isfinite(x), x, 0)
        info = np.iinfo(target)
        x = np.clip(x, info.min, info.max)
        # float(int64 max) rounds up to 2**63, which the cast would wrap to int64 min.
        with np.errstate(invalid="ignore"):
            return np.where(x >= float(info.max) + 1, info.max, x.astype(target)).astype(target)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(target)
