"""Checks for values a user passes to the builder API, at the call that takes them.

A value that cannot go on the wire (an int past int64, a string that is no
number) is a GraphError naming the argument here, not an OverflowError at
serialize or a TypeError deep inside prepare.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable
from typing import Any

import numpy as np

from sigdnn.dtypes import DataType, as_data_type, round_to
from sigdnn.errors import GraphError

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
DTypeLike = DataType | str | None


def dtype_or_none(value: Any) -> DataType | None:
    return None if value is None else as_data_type(value)


def integer(value: Any, what: str) -> int:
    """An int64 value (bools refused: ``True`` is no size)."""
    if isinstance(value, bool):
        raise GraphError(f"{what} must be an integer, got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise GraphError(f"{what} must be an integer, got {value!r}") from None
    if not INT64_MIN <= number <= INT64_MAX:
        raise GraphError(f"{what} = {number} does not fit in int64")
    return number


def ints(values: Iterable[Any], what: str) -> tuple[int, ...]:
    """A sequence of int64 values."""
    if isinstance(values, (str, bytes)):
        raise GraphError(f"{what} must be a sequence of integers, got {values!r}")
    try:
        items = list(values)
    except TypeError:
        raise GraphError(f"{what} must be a sequence of integers, got {values!r}") from None
    return tuple(integer(v, f"{what}[{i}]") for i, v in enumerate(items))


def real(value: Any, what: str, *, finite: bool = False) -> float:
    """A float64 value (NaN / inf allowed unless ``finite``)."""
    if isinstance(value, (bool, str, bytes)):
        raise GraphError(f"{what} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        raise GraphError(f"{what} must be a number, got {value!r}") from None
    if finite and not math.isfinite(number):
        raise GraphError(f"{what} must be finite, got {number}")
    return number


def scalar_value(value: Any, dtype: DataType, what: str) -> np.ndarray:
    """One value as a 0-d array of ``dtype``, exactly, or GraphError.

    Refused: None, complex, text, an array of several values, an integer
    out of the dtype's range or not whole, a finite float that would round
    to infinity. NaN and infinities pass for float dtypes when given.
    """
    if isinstance(value, np.ndarray):
        if value.size != 1:
            raise GraphError(f"{what} takes one value, got shape {list(value.shape)}")
        value = value.reshape(()).item()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, np.bool_)):
        number: Any = bool(value)
    elif isinstance(value, (int, float)) and not isinstance(value, complex):
        number = value
    else:
        raise GraphError(f"{what} must be a real number or bool, got {value!r}")
    if dtype is DataType.BOOL:
        if number not in (0, 1):
            raise GraphError(f"{what}: {number!r} is not a bool")
        return np.asarray(bool(number))
    if dtype.is_integer:
        info = np.iinfo(dtype.numpy)
        if isinstance(number, float) and (not math.isfinite(number) or number != int(number)):
            raise GraphError(f"{what}: {number!r} is not a whole number for {dtype}")
        if not info.min <= int(number) <= info.max:
            raise GraphError(f"{what}: {int(number)} does not fit in {dtype} ({info.min}..{info.max})")
        return np.asarray(int(number), dtype=dtype.numpy)
    try:
        wide = float(number)
    except OverflowError:
        raise GraphError(f"{what}: {number!r} is too large for {dtype}") from None
    rounded = round_to(np.asarray(wide), dtype)
    if math.isfinite(wide) and not np.isfinite(rounded.astype(np.float64)):
        raise GraphError(f"{what}: {number!r} overflows {dtype}")
    return np.asarray(rounded, dtype=dtype.numpy)


def text(value: Any, what: str) -> str:
    """A name that the wire can carry: a str that encodes as UTF-8 (no lone surrogates)."""
    if not isinstance(value, str):
        raise GraphError(f"{what} must be a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise GraphError(f"{what} {value!r} is not valid UTF-8 text ({e.reason})") from None
    return value


def optional_integer(value: Any, what: str) -> int | None:
    return None if value is None else integer(value, what)
