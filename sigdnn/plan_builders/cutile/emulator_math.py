"""The emulator's float math (``ct.exp``, ``ct.where``, ``ct.maximum``, ...): cuTile's semantics in NumPy.

Transcendentals are computed in float64 and rounded to the input's dtype,
within an ulp like the GPU's (NumPy's own float32 ones are not); integer
inputs are refused where cuTile refuses them; ``maximum`` / ``minimum``
skip a NaN operand unless asked to propagate it. ``emulator`` re-exports
every name, as kernels reach them through ``ct``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def quiet() -> Any:
    """NumPy's floating-point warnings off: the GPU raises none (inf, NaN and overflow are values)."""
    return np.errstate(all="ignore")


def _unary(fn: Callable[[np.ndarray], np.ndarray], floats_only: bool = True) -> Callable[..., np.ndarray]:
    def apply(x: Any, **_: Any) -> np.ndarray:
        x = np.asarray(x)
        if floats_only and x.dtype.kind in "iub":
            raise TypeError("integer inputs are not supported by cuTile's float math (floor, ceil, exp, ...)")
        with quiet():
            return fn(x)

    return apply


def _rounded(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` in float64, rounded to the input's dtype: within an ulp, like the GPU's (NumPy's float32 exp is not)."""
    return lambda x: fn(x.astype(np.float64)).astype(x.dtype) if x.dtype == np.float32 else fn(x)


exp = _unary(_rounded(np.exp))


def exp2(x: Any, *, flush_to_zero: bool = False) -> np.ndarray:
    """2^x within an ulp (MUFU.EX2's 2 ulps are the accuracy check's to model); ``flush_to_zero`` flushes
    subnormal results to 0 as ex2.approx.ftz does (subnormal inputs are too close to 0 to matter)."""
    with quiet():
        r = _rounded(np.exp2)(np.asarray(x))
    if flush_to_zero and r.dtype == np.float32:
        r = np.where(np.abs(r) < np.finfo(np.float32).tiny, np.float32(0.0), r)
    return r


log = _unary(_rounded(np.log))
sin = _unary(_rounded(np.sin))
cos = _unary(_rounded(np.cos))
tan = _unary(_rounded(np.tan))
tanh = _unary(_rounded(np.tanh))
sqrt = _unary(np.sqrt)
rsqrt = _unary(_rounded(lambda x: 1.0 / np.sqrt(x)))
floor = _unary(np.floor)
ceil = _unary(np.ceil)
abs = _unary(np.abs, floats_only=False)
isnan = _unary(np.isnan)


class RoundingMode:
    APPROX = "approx"
    FULL = "full"


def truediv(x: Any, y: Any, **_: Any) -> np.ndarray:
    with quiet():
        return np.true_divide(x, y)


def pow(x: Any, y: Any) -> np.ndarray:
    if np.result_type(x, y).kind in "iub":
        raise TypeError("pow: integer inputs are not supported (cuTile)")
    with quiet():
        return np.power(np.asarray(x, np.float64), y).astype(np.result_type(x, y))


def mod(x: Any, y: Any) -> np.ndarray:
    with quiet():
        return np.mod(x, y)


def where(cond: Any, x: Any, y: Any) -> np.ndarray:
    """Python scalars take the other operand's dtype (cuTile's loosely typed constants); two give float32."""
    if isinstance(x, float) and isinstance(y, float):
        return np.where(cond, np.float32(x), np.float32(y))
    return np.where(cond, x, y)


def maximum(x: Any, y: Any, *, propagate_nan: bool = False, **_: Any) -> np.ndarray:
    """Like cuTile's: a NaN operand gives the other operand unless ``propagate_nan``."""
    return np.maximum(x, y) if propagate_nan else np.fmax(x, y)


def minimum(x: Any, y: Any, *, propagate_nan: bool = False, **_: Any) -> np.ndarray:
    return np.minimum(x, y) if propagate_nan else np.fmin(x, y)


def exact_fma(a: Any, b: Any, c: Any) -> np.ndarray:
    """a * b + c rounded once, as the GPU's FMA does (float32 operands: the float64 product is exact)."""
    a, b, c = (np.asarray(v) for v in (a, b, c))
    dtype = np.result_type(a, b, c)
    if dtype != np.float32:
        return a * b + c
    with quiet():
        return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(np.float32)
