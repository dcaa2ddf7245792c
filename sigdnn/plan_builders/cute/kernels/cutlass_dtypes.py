"""The cutlass element type of each sigdnn dtype name a CuTe kernel takes (one table for every kernel)."""

from __future__ import annotations

from typing import Any

import cutlass

DTYPES: dict[str, Any] = {
    "float16": cutlass.Float16,
    "bfloat16": cutlass.BFloat16,
    "float32": cutlass.Float32,
    "fp8_e4m3": cutlass.Float8E4M3FN,
    "fp8_e5m2": cutlass.Float8E5M2,
}
