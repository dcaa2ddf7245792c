"""Where a math function writes a result block by block instead of returning it in float64.

The reference computes in float64 and rounds each output once to its
declared dtype. A math function handed a Sink rounds each finished block
straight into the caller's array (``store`` is that single rounding), so no
float64 copy of the whole result is ever made: on the large memory-bound
ops that copy and its cast pass cost more than the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np

WIDE = np.dtype(np.float64)


class Sink(NamedTuple):
    """An output array of the op's logical shape (any dtype, any strides) and its rounding store."""

    array: np.ndarray
    store: Callable[[np.ndarray, np.ndarray], None]
    """store(dst, values): values (float64) rounded once into dst, a view of ``array``."""
    casts: bool = False
    """store is NumPy's own cast (float64, float32 and float16 arrays): a ufunc on float64 operands may
    then write into ``array`` itself, its output cast being that same single rounding (one pass fewer)."""


def wide(a: np.ndarray) -> np.ndarray:
    """a in float64: a itself when it already is, else an exact widening copy (every float dtype widens exactly)."""
    return a if a.dtype == WIDE else a.astype(WIDE)
