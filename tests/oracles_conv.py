"""Independent oracles for the reference conv_fprop and matmul tests.

Nothing here calls sigdnn's rounding or shape rules: the point is to check
them. Exact rounding picks, among the few representable numbers around a
cheap guess, the one nearest to the float64 value (ties to even), so it never
inherits the double rounding of a float64 -> float32 -> bfloat16 cast.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import ml_dtypes
import numpy as np

# name -> (storage dtype, same-width unsigned dtype)
FORMATS: dict[str, tuple[np.dtype, np.dtype]] = {
    "float32": (np.dtype(np.float32), np.dtype(np.uint32)),
    "float16": (np.dtype(np.float16), np.dtype(np.uint16)),
    "bfloat16": (np.dtype(ml_dtypes.bfloat16), np.dtype(np.uint16)),
}


def _format(dtype: str) -> tuple[np.dtype, np.dtype, int, int]:
    """Storage dtype, bits dtype, sign bit and the bits of the largest finite value."""
    target, uint = FORMATS[dtype]
    sign = 1 << (8 * target.itemsize - 1)
    max_bits = int(np.array(ml_dtypes.finfo(target).max, dtype=target).view(uint))
    return target, uint, sign, max_bits


def exact_round(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 ``x`` to ``dtype`` once: nearest, ties to even, overflow to inf."""
    x = np.asarray(x, dtype=np.float64)
    target, uint, sign, max_bits = _format(dtype)
    mag = np.abs(x)
    # A guess within one unit of the answer (it may double-round); its neighbours hold the answer.
    with np.errstate(over="ignore"):
        guess = mag.astype(np.float32).astype(target).view(uint).astype(np.int64)
    guess = np.minimum(guess, max_bits)
    cands = np.clip(guess[..., None] + np.arange(-2, 3), 0, max_bits)
    values = cands.astype(uint).view(target).astype(np.float64)
    # Exact: the two nearest candidates lie within a factor 2 of x (Sterbenz) or are 0.
    dist = np.abs(values - mag[..., None])
    nearest = dist == dist.min(axis=-1, keepdims=True)
    even = nearest & (cands % 2 == 0)
    pick = np.where(even.any(axis=-1), even.argmax(axis=-1), nearest.argmax(axis=-1))
    bits = np.take_along_axis(cands, pick[..., None], axis=-1)[..., 0]
    # IEEE overflow: |x| >= max + ulp(max)/2 rounds to infinity (max is odd, infinity even).
    top = float(np.array(max_bits, dtype=uint).view(target))
    below = float(np.array(max_bits - 1, dtype=uint).view(target))
    inf_bits = int(np.array(np.inf, dtype=target).view(uint))
    bits = np.where(mag >= top + (top - below) / 2, inf_bits, bits)
    bits = np.where(np.signbit(x), bits | sign, bits)
    return bits.astype(uint).view(target)


def ulp_distance(a: np.ndarray, b: np.ndarray, dtype: str) -> np.ndarray:
    """How many representable steps of ``dtype`` lie between a and b (+0 == -0)."""
    target, uint, sign, _ = _format(dtype)

    def ordered(v: np.ndarray) -> np.ndarray:
        bits = np.ascontiguousarray(v, dtype=target).view(uint).astype(np.int64)
        mag = bits & (sign - 1)
        return np.where(bits & sign, -mag, mag)

    return np.abs(ordered(a) - ordered(b))


def random_values(rng: np.random.Generator, shape: Sequence[int], dtype: str, exact: bool) -> np.ndarray:
    """Inputs representable in ``dtype``, as float64.

    ``exact``: small integers times powers of two, so every float64 sum of
    products is exact whatever the order; the float64 result is then the true
    one and the rounded output must match bit for bit. Otherwise normals.
    """
    if exact:
        lo, hi = {"float16": (-3, 2), "bfloat16": (0, 12), "float32": (0, 14)}[dtype]
        v = rng.integers(-8, 9, size=shape) * np.exp2(rng.integers(lo, hi + 1, size=shape))
    else:
        v = rng.standard_normal(shape)
    return exact_round(v, dtype).astype(np.float64)


def packed_strides(dims: Sequence[int], order: Sequence[int], pad: Sequence[int] | None = None) -> tuple[int, ...]:
    """Element strides for ``order`` (outermost axis first), axis i padded by pad[i] elements."""
    strides = [0] * len(dims)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= dims[axis] + (pad[axis] if pad else 0)
    return tuple(strides)


def layout_axes(layout: str, rank: int) -> list[int]:
    """Axis order for NC-first logical dims: channels last or not."""
    if layout in ("NHWC", "NDHWC", "NWC"):
        return [0, *range(2, rank), 1]
    return list(range(rank))


def strided_buffer(
    values: np.ndarray, strides: Sequence[int], dtype: np.dtype, fill: float = np.nan
) -> tuple[np.ndarray, np.ndarray]:
    """(view, flat buffer): ``values`` at element ``strides``; the gaps hold ``fill``."""
    span = 1 + sum((d - 1) * s for d, s in zip(values.shape, strides))
    buf = np.full(span, fill, dtype=dtype)
    view = np.lib.stride_tricks.as_strided(
        buf, shape=values.shape, strides=tuple(s * buf.itemsize for s in strides), writeable=True
    )
    view[...] = values.astype(dtype)
    return view, buf


def strided_array(values: np.ndarray, strides: Sequence[int], dtype: np.dtype, fill: float = np.nan) -> np.ndarray:
    """A view with ``values`` at element ``strides``; the gaps hold ``fill``."""
    return strided_buffer(values, strides, dtype, fill)[0]


def conv_out_size(size: int, pre: int, post: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length along one spatial axis (cross-correlation, floor)."""
    return (size + pre + post - dilation * (kernel - 1) - 1) // stride + 1


def brute_conv(
    x: np.ndarray,
    w: np.ndarray,
    pre: Sequence[int],
    post: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
) -> np.ndarray:
    """Every output element, every tap, one at a time, in float64."""
    n, c, *size = x.shape
    k, cg, *kernel = w.shape
    kg = k // (c // cg)
    s = len(size)
    out = [conv_out_size(size[i], pre[i], post[i], kernel[i], stride[i], dilation[i]) for i in range(s)]
    y = np.zeros((n, k, *out), dtype=np.float64)
    for b, oc in itertools.product(range(n), range(k)):
        group = oc // kg
        for o in itertools.product(*(range(e) for e in out)):
            acc = 0.0
            for ci in range(cg):
                for r in itertools.product(*(range(e) for e in kernel)):
                    pos = tuple(o[i] * stride[i] - pre[i] + r[i] * dilation[i] for i in range(s))
                    if all(0 <= pos[i] < size[i] for i in range(s)):
                        acc += float(x[(b, group * cg + ci, *pos)]) * float(w[(oc, ci, *r)])
            y[(b, oc, *o)] = acc
    return y


def brute_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Triple loop per broadcast batch index, accumulating in a's widened type."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    m, k = a.shape[-2:]
    n = b.shape[-1]
    wide = np.int64 if a.dtype.kind in "iu" else np.float64
    a_b = np.broadcast_to(a, (*batch, m, k))
    b_b = np.broadcast_to(b, (*batch, k, n))
    c = np.zeros((*batch, m, n), dtype=wide)
    for idx in itertools.product(*(range(e) for e in batch)):
        for i in range(m):
            for j in range(n):
                acc = wide(0)
                for p in range(k):
                    acc += wide(a_b[(*idx, i, p)]) * wide(b_b[(*idx, p, j)])
                c[(*idx, i, j)] = acc
    return c


def torch_conv(
    x: np.ndarray,
    w: np.ndarray,
    pre: Sequence[int],
    post: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
) -> np.ndarray:
    """torch's float64 conv{1,2,3}d, asymmetric padding applied with F.pad first."""
    import torch
    import torch.nn.functional as F

    xt = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    wt = torch.from_numpy(np.ascontiguousarray(w, dtype=np.float64))
    pad: list[int] = []
    for p, q in reversed(list(zip(pre, post))):  # F.pad lists the last axis first
        pad += [p, q]
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[x.ndim - 2]
    groups = x.shape[1] // w.shape[1]
    y = conv(F.pad(xt, pad), wt, stride=tuple(stride), dilation=tuple(dilation), groups=groups)
    return y.numpy()
