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
import re
from collections.abc import Callable
from typing import Any

import numpy as np

from sigdnn.errors import GraphError, UsageError
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
        return _numpy_of(self)

    @property
    def itemsize(self) -> int:
        return _numpy_of(self).itemsize

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


# NumPy's own types here; ml_dtypes' join on first use (_load_ml_dtypes): importing it costs 0.3-1.5 s,
# which a graph without bfloat16 or fp8 tensors should not pay.
_NUMPY: dict[DataType, np.dtype] = {
    DataType.FLOAT32: np.dtype(np.float32),
    DataType.FLOAT16: np.dtype(np.float16),
    DataType.FLOAT64: np.dtype(np.float64),
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
_BY_NUMPY = {v: k for k, v in _NUMPY.items()}
_ML_DTYPES = {DataType.BFLOAT16: "bfloat16", DataType.FP8_E4M3: "float8_e4m3fn", DataType.FP8_E5M2: "float8_e5m2"}


def _load_ml_dtypes() -> None:
    """Add ml_dtypes' bfloat16 and fp8 types to the NumPy maps (idempotent; entries are whole when published)."""
    import ml_dtypes

    for dtype, name in _ML_DTYPES.items():
        found = np.dtype(getattr(ml_dtypes, name))
        _BY_NUMPY[found] = dtype
        _NUMPY[dtype] = found


def is_ml_dtypes(dtype: np.dtype) -> bool:
    """Whether a NumPy dtype is one of ml_dtypes' (their kinds vary: bfloat16 is "V", float8_e5m2 "f")."""
    return dtype.type.__module__.startswith("ml_dtypes")


def _numpy_of(dtype: DataType) -> np.dtype:
    found = _NUMPY.get(dtype)
    if found is None:
        _load_ml_dtypes()
        found = _NUMPY[dtype]
    return found


# Every spelling users type beyond the names and short names (_BY_NAME joins all three), lower case. cuDNN
# (HALF, DOUBLE), NumPy and ml_dtypes (float8_e4m3fn), torch and the usual short forms all map to one
# DataType. ml_dtypes' "float8_e4m3" (IEEE-style, with infinities) and the
# "fnuz" formats are other formats, so they are not aliases.
_ALIASES: dict[str, DataType] = {
    "fp32": DataType.FLOAT32,
    "single": DataType.FLOAT32,
    "fp16": DataType.FLOAT16,
    "half": DataType.FLOAT16,
    "fp64": DataType.FLOAT64,
    "double": DataType.FLOAT64,
    "e4m3fn": DataType.FP8_E4M3,
    "fp8_e4m3fn": DataType.FP8_E4M3,
    "float8_e4m3fn": DataType.FP8_E4M3,
    "float8_e5m2": DataType.FP8_E5M2,
    "boolean": DataType.BOOL,
}
# Names whose width depends on who says them: refused rather than guessed.
_AMBIGUOUS = {
    "float": "cuDNN's FLOAT is 32-bit, NumPy's and Python's float is 64-bit: say 'float32' or 'float64'",
    "int": "C's int is 32-bit, NumPy's and Python's int is 64-bit: say 'int32' or 'int64'",
    "i8": "sigdnn's short name i8 is int8, NumPy's 'i8' is int64: say 'int8' or 'int64'",
    "u8": "sigdnn's short name u8 is uint8, NumPy's 'u8' is uint64: say 'uint8'",
}
_BY_NAME: dict[str, DataType] = {
    name: dt
    for name, dt in {**{d.value: d for d in DataType}, **{_SHORT[d]: d for d in DataType}, **_ALIASES}.items()
    if name not in _AMBIGUOUS
}
# torch's own aliases that _BY_NAME refuses or lacks, unambiguous inside torch ("torch.float" is float32).
_TORCH_ALIASES = {"float": DataType.FLOAT32, "int": DataType.INT32, "long": DataType.INT64}


_SIZED_CODE = re.compile(r"[<>=|]?([fiu][1248]|b1|\?)")


class DataTypeError(GraphError, UsageError):
    """A value that names no sigdnn data type (or names one ambiguously).

    A GraphError because the graph builder raises it for a bad dtype argument;
    a UsageError (so also a TypeError and ValueError) for code that catches
    Python's conventional exceptions.
    """


def as_data_type(value: object) -> DataType:
    """The DataType a user means by ``value``.

    Takes a DataType; a name in any usual spelling, case-insensitive ("float16",
    "fp16", "half", "BF16", "float8_e4m3fn", "e4m3", "torch.float32"); a NumPy
    dtype, scalar type or dtype string; an ml_dtypes type; a torch dtype
    (recognized by its type, without importing torch). "float" and "int" are
    refused: their width depends on the convention (cuDNN vs NumPy).
    """
    if isinstance(value, DataType):
        return value
    if isinstance(value, str):
        return _from_name(value)
    if value is None:  # np.dtype(None) would be float64
        raise DataTypeError(f"no data type given (None); give one of {_choices()}")
    if value is float or value is int:
        raise DataTypeError(f"data type {value.__name__} (the Python type) is ambiguous: {_AMBIGUOUS[value.__name__]}")
    kind = type(value)
    if kind.__module__ == "torch" and kind.__name__ == "dtype":
        name = str(value).removeprefix("torch.")
        found = _BY_NAME.get(name)
        if found is None:
            raise DataTypeError(f"torch.{name} has no sigdnn data type; sigdnn has {_choices()}")
        return found
    try:
        dtype = np.dtype(value)
    except Exception:  # np.dtype raises TypeError, ValueError, or whatever a foreign object's .dtype raises
        raise DataTypeError(
            f"{_show(value)} is not a data type; give a name ({_choices()}), a NumPy / ml_dtypes dtype or a torch dtype"
        ) from None
    return _from_numpy(dtype, value)


def _from_name(text: str) -> DataType:
    name = text.strip().lower()
    if name in _BY_NAME:
        return _BY_NAME[name]
    if name in _AMBIGUOUS:
        raise DataTypeError(f"data type {text!r} is ambiguous: {_AMBIGUOUS[name]}")
    if name.startswith("torch."):
        found = _BY_NAME.get(name[6:]) or _TORCH_ALIASES.get(name[6:])
        if found is not None:
            return found
    if _SIZED_CODE.fullmatch(name):  # NumPy's sized codes ("<f4", "i8", "?"); "l" or "int_" vary by platform
        return _from_numpy(np.dtype(name), text)
    raise DataTypeError(f"unknown data type {_show(text)}{_close_match(name)}; sigdnn has {_choices()}")


def _from_numpy(dtype: np.dtype, value: object) -> DataType:
    if dtype.byteorder not in "=|":
        dtype = dtype.newbyteorder("=")
    found = _BY_NUMPY.get(dtype)
    if found is None and is_ml_dtypes(dtype):  # the caller has imported ml_dtypes: add its types
        _load_ml_dtypes()
        found = _BY_NUMPY.get(dtype)
    if found is None:
        raise DataTypeError(
            f"{_show(value)} has no sigdnn data type{_close_match(dtype.name)}; sigdnn has {_choices()}"
        )
    return found


def _choices() -> str:
    return ", ".join(dt.value for dt in DataType)


def _close_match(name: str) -> str:
    import difflib  # only on the error path

    match = difflib.get_close_matches(name, list(_BY_NAME), n=1, cutoff=0.6)
    return f" (did you mean {_BY_NAME[match[0]].value!r}?)" if match else ""


def _show(value: object) -> str:
    """A short, one-line description of an arbitrary object for a message."""
    try:
        text = repr(value)
    except Exception:
        text = f"a {type(value).__name__}"
    text = text.replace("\n", " ")
    return text if len(text) <= 80 else text[:77] + "..."


def from_wire(value: int) -> DataType | None:
    """The DataType of a wire enum value; None for UNSET; KeyError if unknown."""
    if value == _Wire.UNSET:
        return None
    return _BY_WIRE[value]


_F32_DROPPED = np.int64((1 << 29) - 1)  # float64 significand bits below float32's 24
_F32_STICKY = np.int64(1 << 29)  # the last bit float32 keeps
_ABS_BITS = np.int64((1 << 63) - 1)
# |x| bit patterns of float32's normal range (all 24 bits kept, no overflow): [2^-126, 2^128)
_F32_NORMAL_BITS = (np.float64(2.0**-126).view(np.int64), np.float64(2.0**128).view(np.int64))


_CASTS_ONCE: dict[DataType, bool] = {}
_MANTISSA_BITS = {"BFLOAT16": 7, "FP8_E4M3": 3, "FP8_E5M2": 2}


def casts_once(dtype: DataType, cast: Callable[[np.ndarray, Any], np.ndarray] | None = None) -> bool:
    """Whether ml_dtypes casts float64 to ``dtype`` (bfloat16, fp8) with one rounding, so ``round_to`` may too.

    Older ml_dtypes went through float32, which rounds twice: 1 + u/2 + 2^-30 (u the format's unit in the last
    place at 1) lands on the midpoint 1 + u/2 in float32 and then ties down to 1, where one rounding gives
    1 + u. Such a cast fails these witnesses (either sign); one that passes them is used directly (about five
    times faster than rounding to odd through float32 first; tests/test_dtypes.py checks it against the oracle).
    ``cast`` replaces NumPy's (for tests). Answered once per dtype.
    """
    found = _CASTS_ONCE.get(dtype) if cast is None else None
    if found is None:
        u = 2.0 ** -_MANTISSA_BITS[dtype.name]
        witnesses = np.array([1 + u / 2 + 2**-30, -(1 + u / 2 + 2**-30)])
        got = (cast or (lambda v, t: v.astype(t)))(witnesses, dtype.numpy).astype(np.float64)
        found = bool(np.array_equal(got, [1 + u, -(1 + u)]))
        if cast is None:
            _CASTS_ONCE[dtype] = found
    return found


def _float64_to_float32_round_to_odd(x: np.ndarray) -> np.ndarray:
    """Round float64 to float32 so that a later narrower rounding is exact.

    In float32's normal range this is integer work on the float64 pattern:
    clear the 29 bits float32 lacks and set the last kept bit when any was
    set (round to odd), after which the cast is exact. Zeros, subnormals,
    overflow, inf and NaN (all outside that range of patterns) take the
    general path.
    """
    x = np.asarray(x, dtype=np.float64)
    bits = x.view(np.int64)
    dropped = bits & _F32_DROPPED
    sticky = (dropped + _F32_DROPPED) & _F32_STICKY  # bit 29 set exactly when some dropped bit is
    magnitude = bits & _ABS_BITS
    general = (magnitude < _F32_NORMAL_BITS[0]) | (magnitude >= _F32_NORMAL_BITS[1])
    odd = np.where(general, 0, (bits ^ dropped) | sticky)  # (the general ones could overflow the cast)
    out = np.asarray(odd).view(np.float64).astype(np.float32)
    if general.any():
        out[general] = _float64_to_float32_round_to_odd_general(x[general])
    return out


def _float64_to_float32_round_to_odd_general(x: np.ndarray) -> np.ndarray:
    """Round float64 to float32 so that a later narrower rounding is exact (any value)."""
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
        if x.dtype == np.float64 and not casts_once(dtype):
            x = _float64_to_float32_round_to_odd(x)
        with np.errstate(over="ignore"):  # past the format's range: inf (e4m3: NaN), as the format says, silently
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


def rounder(dtype: DataType) -> Callable[[np.ndarray], np.ndarray]:
    """``round_to`` specialised once for ``dtype`` (plans call it per node, so the dispatch is paid once).

    float64 values bound for float64, float32 or float16 round exactly with a
    plain cast (IEEE round-to-nearest-even, overflow to inf); everything
    else takes ``round_to``'s exact paths.
    """
    target = dtype.numpy
    if dtype in (DataType.FLOAT64, DataType.FLOAT32, DataType.FLOAT16):

        def cast(x: np.ndarray) -> np.ndarray:
            if x.dtype == np.float64:
                with np.errstate(over="ignore"):  # overflow to inf, as round_to, without a warning
                    return x.astype(target)
            return round_to(x, dtype)

        return cast
    return lambda x: round_to(x, dtype)
