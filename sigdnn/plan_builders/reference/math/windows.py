"""Sliding-window views, padding and chunking shared by convolution and pooling.

A convolution or pooling window is read through one ``as_strided`` view of
the (padded) input with logical axes (N, G, C/G, *out, *kernel): no index
arrays, no per-element Python. Copies are made only where BLAS or a reduction
needs contiguous data, a chunk of rows at a time, so scratch memory stays at
about one padded copy of the input plus one cache-sized chunk.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

# Bytes of one chunk's scratch (im2col columns, window copies): big enough that a GEMM over
# it runs at full speed, small enough that it stays in the last-level cache.
CHUNK_BYTES = 6 << 20
# A GEMM slows down below ~1-2K positions a chunk; when a position's columns are long (deep
# layers), a chunk may grow past CHUNK_BYTES to reach that many, up to MAX_CHUNK_BYTES.
MIN_CHUNK_POSITIONS = 2048
MAX_CHUNK_BYTES = 48 << 20


def chunk_bytes(row_bytes: int) -> int:
    """Scratch bytes to aim at for chunks whose positions take ``row_bytes`` each."""
    return min(max(CHUNK_BYTES, MIN_CHUNK_POSITIONS * row_bytes), MAX_CHUNK_BYTES)


def out_size(size: int, pre: int, post: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length along one spatial axis (floor: a partial last window is dropped)."""
    return (size + pre + post - dilation * (kernel - 1) - 1) // stride + 1


def channels_last(a: np.ndarray) -> bool:
    """True when a's channel axis (1) varies fastest in memory among its non-trivial axes.

    The convolutions pick the GEMM orientation from it, so that neither the
    input nor the output needs a transposing copy.
    """
    if a.ndim < 3 or a.shape[1] == 1:
        return False
    spatial = [abs(s) for s, d in zip(a.strides[2:], a.shape[2:]) if d > 1]
    return not spatial or abs(a.strides[1]) < min(spatial)


def empty_like_layout(dims: Sequence[int], last: bool) -> np.ndarray:
    """An uninitialised float64 array of logical dims (N, C, *S), stored NC... or N...C."""
    dims = tuple(dims)
    if not last:
        return np.empty(dims)
    stored = np.empty((dims[0], *dims[2:], dims[1]))
    return np.moveaxis(stored, -1, 1)


def pad(
    x: np.ndarray, pre: Sequence[int], post: Sequence[int], value: float = 0.0, last: bool | None = None
) -> np.ndarray:
    """x (N, C, *S) with ``value`` around its spatial dims; x itself when there is no padding.

    The copy keeps x's layout (channels first or last) so that it is one plain
    pass; only the border slabs are filled.
    """
    if not any(pre) and not any(post):
        return x
    if last is None:
        last = channels_last(x)
    padded = empty_like_layout((*x.shape[:2], *(s + a + b for s, a, b in zip(x.shape[2:], pre, post))), last)
    interior = tuple(slice(a, a + s) for s, a in zip(x.shape[2:], pre))
    np.copyto(padded[(slice(None), slice(None), *interior)], x)
    for axis, (a, b) in enumerate(zip(pre, post)):
        lead = (slice(None),) * (2 + axis)
        if a:
            padded[(*lead, slice(0, a))] = value
        if b:
            padded[(*lead, slice(padded.shape[2 + axis] - b, None))] = value
    return padded


def windows(
    xp: np.ndarray,
    groups: int,
    kernel: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    out: Sequence[int],
    writeable: bool = False,
) -> np.ndarray:
    """View of padded xp (N, C, *Sp) with axes (N, G, C/G, *out, *kernel).

    Element [n, g, c, o..., r...] is xp[n, g*C/G + c, o*stride + r*dilation].
    For a fixed kernel tap the view is injective, so a writeable view can take
    per-tap scatter-adds (dgrad, pooling backward). A stride along an axis of
    one output, or a dilation along one of one tap, is never stepped: its
    byte stride is 0, however large the step (2^62 overflowed NumPy's view).
    """
    n, c = xp.shape[:2]
    sn, sc, *ss = xp.strides
    shape = (n, groups, c // groups, *out, *kernel)
    strides = (
        sn,
        sc * (c // groups),
        sc,
        *(s * st if o > 1 else 0 for s, st, o in zip(ss, stride, out)),
        *(s * d if r > 1 else 0 for s, d, r in zip(ss, dilation, kernel)),
    )
    return as_strided(xp, shape=shape, strides=strides, writeable=writeable)


def row_chunks(n: int, out: Sequence[int], row_bytes: int, target: int) -> Iterator[tuple[slice, slice]]:
    """(batch slice, first-output-axis slice) pairs covering (N, out[0]) in row-major order.

    A chunk is several whole samples or a run of out[0] rows inside one
    sample, holding about ``target`` bytes of scratch at ``row_bytes`` per
    output position; so a chunk's positions are consecutive in (n, *out)
    order and every chunk is a plain slice of a window view.
    """
    line = math.prod(out[1:]) * row_bytes
    sample = out[0] * line
    if sample <= target:
        step = max(1, target // max(sample, 1))
        for start in range(0, n, step):
            yield slice(start, min(n, start + step)), slice(None)
        return
    step = max(1, target // max(line, 1))
    for b in range(n):
        for start in range(0, out[0], step):
            yield slice(b, b + 1), slice(start, min(out[0], start + step))


def merge_axes(a: np.ndarray, start: int, stop: int) -> np.ndarray | None:
    """a with axes start..stop-1 merged into one, as a view; None when that needs a copy."""
    shape, strides = list(a.shape), list(a.strides)
    kept = [(d, s) for d, s in zip(shape[start:stop], strides[start:stop]) if d != 1]
    if any(outer != inner * d for (_, outer), (d, inner) in itertools.pairwise(kept)):
        return None
    stride = kept[-1][1] if kept else a.itemsize
    merged = math.prod(shape[start:stop])
    return as_strided(
        a, (*shape[:start], merged, *shape[stop:]), (*strides[:start], stride, *strides[stop:]), writeable=False
    )


def weight_matrix(w: np.ndarray, groups: int, last: bool) -> np.ndarray:
    """w (K, C/G, *R) as a GEMM operand, contiguous.

    Channels last: (G, taps*C/G, K/G), contraction index (tap, c), to multiply
    im2col rows from the right. Channels first: (G, K/G, C/G*taps),
    contraction index (c, tap), to multiply im2col columns from the left.
    """
    k, cg = w.shape[:2]
    taps = math.prod(w.shape[2:])
    w4 = w.reshape(groups, k // groups, cg, taps)
    if last:
        return np.ascontiguousarray(w4.transpose(0, 3, 2, 1)).reshape(groups, taps * cg, k // groups)
    return np.ascontiguousarray(w4).reshape(groups, k // groups, cg * taps)


def columns(view: np.ndarray, last: bool, scratch: np.ndarray) -> np.ndarray:
    """Copy a window view (N, G, C/G, *out, *kernel) into ``scratch`` as GEMM operands.

    Channels last: (G, positions, taps*C/G), one row per output position.
    Channels first: (G, C/G*taps, positions), one column per output position.
    The copy keeps the input's contiguous runs innermost where it can.
    """
    s = (view.ndim - 3) // 2
    o_axes = tuple(range(3, 3 + s))
    r_axes = tuple(range(3 + s, 3 + 2 * s))
    n, g, cg = view.shape[:3]
    positions = n * math.prod(view.shape[3 : 3 + s])
    contraction = cg * math.prod(view.shape[3 + s :])
    perm = (1, 0, *o_axes, *r_axes, 2) if last else (1, 2, *r_axes, 0, *o_axes)
    source = view.transpose(perm)
    dest = scratch[: source.size].reshape(source.shape)
    np.copyto(dest, source)
    return dest.reshape((g, positions, contraction) if last else (g, contraction, positions))
