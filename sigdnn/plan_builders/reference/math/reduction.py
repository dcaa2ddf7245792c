"""Reductions (cuDNN's modes) over the axes where the output's dim is 1, in float64 or exact int64.

Reduced axes: those where out_dims is 1 and x's dim is not (a size-1 axis
reduces to itself either way). Every other dim of out_dims must equal x's.

Conventions (docs/ops.md), including empty reductions (a reduced dim of 0):
  add   sum                (empty: 0)
  mul   product            (empty: 1)
  min   minimum            (empty: +inf; int64: its largest value)
  max   maximum            (empty: -inf; int64: its smallest value)
  amax  max |x|            (empty: 0)
  avg   sum / count        (empty: NaN, 0/0)
  norm1 sum |x|            (empty: 0)
  norm2 sqrt(sum x^2)      (empty: 0)
  mul_no_zeros  product of the non-zero elements (1 when all are zero, or empty)
NaN propagates through min, max and amax (any NaN gives NaN), as torch.amin /
amax do. norm2 scales by a power of two near max |x| first, which is exact,
so sum x^2 neither overflows nor underflows where the norm itself does not.

int64 (exact; wraps on overflow, which docs/ops.md lets no caller rely on): add, mul,
min, max, amax, norm1, mul_no_zeros. avg and norm2 have no exact integer
result and are float only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sigdnn.plan_builders.reference.math.parallel import ieee

FLOAT_MODES = ("add", "mul", "min", "max", "amax", "avg", "norm1", "norm2", "mul_no_zeros")
INTEGER_MODES = ("add", "mul", "min", "max", "amax", "norm1", "mul_no_zeros")


def reduced_axes(x_shape: Sequence[int], out_dims: Sequence[int]) -> tuple[int, ...]:
    """Axes reduced to produce out_dims from x_shape; ValueError if out_dims is not such a reduction."""
    if len(out_dims) != len(x_shape) or any(o not in (1, d) for o, d in zip(out_dims, x_shape)):
        raise ValueError(f"output dims {list(out_dims)} are not a reduction of {list(x_shape)}: each must be 1 or x's")
    return tuple(i for i, (o, d) in enumerate(zip(out_dims, x_shape)) if o == 1 and d != 1)


@ieee
def reduction(x: np.ndarray, mode: str, out_dims: Sequence[int]) -> np.ndarray:
    """x (float64 or int64) reduced by ``mode`` to out_dims (keepdims), in x's dtype."""
    axes = reduced_axes(x.shape, out_dims)
    integer = x.dtype.kind in "iu"
    if mode not in (INTEGER_MODES if integer else FLOAT_MODES):
        kind = "int64" if integer else "float64"
        raise ValueError(f"reduction mode {mode!r} is not defined for {kind} (modes: {', '.join(FLOAT_MODES)})")
    if integer:
        x = x.astype(np.int64, copy=False)
        info = np.iinfo(np.int64)
        lowest, highest = info.min, info.max
    else:
        x = x.astype(np.float64, copy=False)
        lowest, highest = -np.inf, np.inf
    kw = {"axis": axes, "keepdims": True}
    if mode == "add":
        y = np.sum(x, **kw)
    elif mode == "mul":
        y = np.prod(x, **kw)
    elif mode == "min":
        y = np.min(x, initial=highest, **kw)
    elif mode == "max":
        y = np.max(x, initial=lowest, **kw)
    elif mode == "amax":
        y = np.max(np.abs(x), initial=0, **kw)
    elif mode == "avg":
        y = np.sum(x, **kw) / float(np.prod([x.shape[a] for a in axes], dtype=np.int64))
    elif mode == "norm1":
        y = np.sum(np.abs(x), **kw)
    elif mode == "norm2":
        y = _norm2(x, axes)
    else:  # mul_no_zeros
        y = np.prod(np.where(x == 0, np.ones((), dtype=x.dtype), x), **kw)
    return np.asarray(y, dtype=x.dtype).reshape(tuple(out_dims))


def _norm2(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """sqrt(sum x^2) with x scaled by 2^-e, e the exponent of max |x| (exact scaling, no overflow)."""
    top = np.max(np.abs(x), axis=axes, keepdims=True, initial=0.0)
    _, e = np.frexp(np.where(np.isfinite(top) & (top > 0), top, 1.0))
    scaled = np.ldexp(x, -e)
    return np.ldexp(np.sqrt(np.sum(scaled * scaled, axis=axes, keepdims=True)), e)
