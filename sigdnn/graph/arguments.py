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

from sigdnn.dtypes import DataType, as_data_type
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
