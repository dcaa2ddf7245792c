"""Convolution forward (cross-correlation) in float64: im2col chunks times one weight matrix.

y[n, k, o] = sum over c in k's group and taps r of x[n, c, o*stride + r*dilation - pre] * w[k, c, r].

The GEMM is oriented by x's memory layout so that neither x nor y is ever
transposed in memory: channels-last x gives rows (n, o) x (tap, c) and a
channels-last y, channels-first x gives (c, tap) x columns (n, o) and y
stored (K, N, *out). Either way the batch is folded into the GEMM's long
side and the columns are copied a cache-sized chunk at a time, straight into
contiguous memory, so every product runs at BLAS speed whatever x's strides.
A 1x1 stride-1 unpadded convolution multiplies x in place when its strides
allow.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sigdnn.plan_builders.reference.math.parallel import ieee
from sigdnn.plan_builders.reference.math.windows import (
    channels_last,
    chunk_bytes,
    columns,
    merge_axes,
    out_size,
    pad,
    row_chunks,
    weight_matrix,
    windows,
)


@ieee
def conv_forward(
    x: np.ndarray,
    w: np.ndarray,
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
) -> np.ndarray:
    """y (N, K, *out) for float64 x (N, C, *S) and w (K, C/G, *R); G = C // w.shape[1]."""
    n, c, *size = x.shape
    k, cg, *kernel = w.shape
    groups = c // cg
    out = [out_size(*a) for a in zip(size, pre_padding, post_padding, kernel, stride, dilation)]
    last = channels_last(x)
    wm = weight_matrix(w, groups, last)
    pointwise = (
        math.prod(kernel) == 1 and all(s == 1 for s in stride) and not any(pre_padding) and not any(post_padding)
    )
    if pointwise:
        y = _pointwise_in_place(x, wm, groups, last)
        if y is not None:
            return y
    positions = n * math.prod(out)
    if last:
        y = np.empty((n, *out, k))
        ymat = y.reshape(positions, groups, k // groups)
    else:
        y = np.empty((k, n, *out))
        ymat = y.reshape(groups, k // groups, positions)
    view = windows(pad(x, pre_padding, post_padding, last=last), groups, kernel, stride, dilation, out)
    row_bytes = c * math.prod(kernel) * 8
    target = chunk_bytes(row_bytes)
    scratch = np.empty(max(target, row_bytes * math.prod(out[1:])) // 8)
    done = 0
    for batch, rows in row_chunks(n, out, row_bytes, target):
        cols = columns(view[batch, :, :, rows], last, scratch)
        span = slice(done, done + (cols.shape[1] if last else cols.shape[2]))
        if last and groups == 1:
            np.matmul(cols[0], wm[0], out=ymat[span, 0])
        elif last:
            ymat[span] = np.matmul(cols, wm).transpose(1, 0, 2)
        else:
            np.matmul(wm, cols, out=ymat[:, :, span])
        done = span.stop
    return np.moveaxis(y, -1, 1) if last else np.moveaxis(y, 0, 1)


def _pointwise_in_place(x: np.ndarray, wm: np.ndarray, groups: int, last: bool) -> np.ndarray | None:
    """A 1x1, stride-1, unpadded conv as a GEMM on x itself; None when x's strides need a copy."""
    n, c, *size = x.shape
    k = wm.shape[2] * groups if last else wm.shape[1] * groups
    cg = c // groups
    if last:
        rows = merge_axes(np.moveaxis(x, 1, -1), 0, x.ndim - 1)  # (N*P, C)
        if rows is None:
            return None
        y = np.empty((rows.shape[0], groups, k // groups))
        if groups == 1:
            np.matmul(rows, wm[0], out=y[:, 0])
        else:
            y[:] = np.matmul(rows.reshape(-1, groups, cg).transpose(1, 0, 2), wm).transpose(1, 0, 2)
        return np.moveaxis(y.reshape(n, *size, k), -1, 1)
    planes = merge_axes(x, 2, x.ndim)  # (N, C, P)
    if planes is None or planes.shape[2] < 64:  # tiny planes: the chunked path folds the batch
        return None
    y = np.matmul(wm, planes.reshape(n, groups, cg, -1))  # (N, G, K/G, P)
    return y.reshape(n, k, *size)
