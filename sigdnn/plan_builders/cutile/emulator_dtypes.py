"""The cuTile emulator's dtype conversions: what ``astype`` and a store into a narrower array do on the GPU.

Kept apart from the emulator's tile operations so that its loads and stores (``emulator_memory``) and its
``astype`` share one definition of each conversion.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sigdnn.plan_builders.cutile.emulator_math import quiet

FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}  # the largest finite values, where conversions saturate


def is_bfloat16(dtype: np.dtype) -> bool:
    return dtype.type.__module__.startswith("ml_dtypes") and dtype.name == "bfloat16"


def to_dtype(x: Any, dtype: np.dtype) -> np.ndarray:
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    with quiet():
        if dtype.kind in "iu" and x.dtype.kind == "f":
            # cvt saturates to a 32- or 64-bit integer (NaN -> 0); a narrower type keeps the low bits
            wide = np.dtype(dtype if dtype.itemsize >= 4 else np.int32)
            info = np.iinfo(wide)
            x = np.trunc(x.astype(np.float64))
            x = np.where(np.isnan(x), 0, np.clip(x, info.min, info.max))
            if float(info.max) + 1 == float(info.max):  # 64-bit: the max rounds up to 2^63 as a float
                return np.where(x >= float(info.max), info.max, x.astype(wide)).astype(dtype)
            return x.astype(wide).astype(dtype)
        if dtype.kind == "b":
            return x != 0
        if dtype.name in ("float8_e4m3fn", "float8_e5m2"):  # fp8 conversions saturate (satfinite): inf too
            top = FP8_MAX[dtype.name]
            return np.clip(x.astype(np.float32), -top, top).astype(dtype)
        if is_bfloat16(dtype):
            return x.astype(np.float32).astype(dtype)
        return x.astype(dtype)


def tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to nearest (ties away) at 10 mantissa bits, as the tensor cores read TF32."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = np.where(finite, (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000), bits)
    return rounded.astype(np.uint32).view(np.float32)
