"""Convolution backward in float64: data gradient (dgrad) and weight gradient (wgrad).

Both are the adjoints of conv_forward's im2col GEMM, with the same
orientation rule (by the memory layout of the big operand) and the same
cache-sized chunks of output positions, the batch folded into each GEMM:

* dgrad, stride 1: a forward convolution of dy with the kernel flipped and
  its channel axes swapped (per group), padded by dilation*(R-1) - padding
  (cropped where that is negative); so it runs at conv_forward's speed, a
  1x1 one as a single GEMM on dy in place.
* dgrad, stride > 1: columns = w^T dy, one GEMM per chunk, then each kernel
  tap's columns are added into a zeroed padded dx through the (injective,
  for a fixed tap) window view, and the padding is cut off.
  Either way input positions no window reaches (stride > kernel span, or a
  right edge the floor division dropped) get 0, so dx may be any size whose
  forward output is dy's (the caller's choice, as conv_transpose's
  output_padding).
* wgrad: dw = dy * columns(x)^T, accumulated over chunks.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from sigdnn.plan_builders.reference.math.conv_forward import conv_forward
from sigdnn.plan_builders.reference.math.windows import (
    channels_last,
    chunk_bytes,
    columns,
    empty_like_layout,
    out_size,
    pad,
    row_chunks,
    weight_matrix,
    windows,
)


def _check_out(size: Sequence[int], out: Sequence[int], args: Sequence[Sequence[int]], kernel: Sequence[int]) -> None:
    pre, post, stride, dilation = args
    want = [out_size(*a) for a in zip(size, pre, post, kernel, stride, dilation)]
    if list(out) != want:
        raise ValueError(f"dy's spatial dims {list(out)} are not the conv output {want} of input dims {list(size)}")


def _gradient_matrix(dy: np.ndarray, groups: int, batch: slice, rows: slice, last: bool) -> np.ndarray:
    """A chunk of dy (N, K, *out) as (G, positions, K/G) (last) or (G, K/G, positions); copied only if needed."""
    k = dy.shape[1]
    if last:
        part = np.moveaxis(dy, 1, -1)[batch, rows]
        return part.reshape(-1, groups, k // groups).transpose(1, 0, 2)
    part = np.moveaxis(dy, 1, 0)[:, batch, rows]
    return part.reshape(groups, k // groups, -1)


def conv_dgrad(
    dy: np.ndarray,
    w: np.ndarray,
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    x_dims: Sequence[int],
) -> np.ndarray:
    """dx (x_dims = N, C, *S) for float64 dy (N, K, *out) and w (K, C/G, *R); G = C // w.shape[1]."""
    n, c, *size = x_dims
    cg, *kernel = w.shape[1:]
    out = list(dy.shape[2:])
    _check_out(size, out, (pre_padding, post_padding, stride, dilation), kernel)
    groups = c // cg
    if all(st == 1 for st in stride):
        return _dgrad_stride_one(dy, w, pre_padding, dilation, size, groups)
    taps = list(itertools.product(*(range(r) for r in kernel)))
    last = channels_last(dy)
    wt = weight_matrix(w, groups, last).transpose(0, 2, 1)  # (G, K/G, taps*C/G) or (G, C/G*taps, K/G)
    padded = [s + a + b for s, a, b in zip(size, pre_padding, post_padding)]
    dxp = empty_like_layout((n, c, *padded), last)
    dxp[...] = 0.0
    view = windows(dxp, groups, kernel, stride, dilation, out, writeable=True)
    row_bytes = c * len(taps) * 8
    target = chunk_bytes(row_bytes)
    s = len(size)
    for batch, rows in row_chunks(n, out, row_bytes, target):
        grad = _gradient_matrix(dy, groups, batch, rows, last)
        cols = np.matmul(grad, wt) if last else np.matmul(wt, grad)
        part = view[batch, :, :, rows]
        nb, chunk_out = part.shape[0], part.shape[3 : 3 + s]
        if last:  # (G, nb, *out, tap, C/G) -> per tap (nb, G, C/G, *out)
            per_tap = cols.reshape(groups, nb, *chunk_out, len(taps), cg)
            order = (1, 0, 2 + s, *range(2, 2 + s))
            for t, r in enumerate(taps):
                dest = part[(Ellipsis, *r)]
                np.add(dest, per_tap[..., t, :].transpose(order), out=dest)
        else:  # (G, C/G, tap, nb, *out) -> per tap (nb, G, C/G, *out)
            per_tap = cols.reshape(groups, cg, len(taps), nb, *chunk_out)
            order = (2, 0, 1, *range(3, 3 + s))
            for t, r in enumerate(taps):
                dest = part[(Ellipsis, *r)]
                np.add(dest, per_tap[:, :, t].transpose(order), out=dest)
    interior = tuple(slice(a, a + e) for a, e in zip(pre_padding, size))
    return dxp[(slice(None), slice(None), *interior)]


def _dgrad_stride_one(
    dy: np.ndarray, w: np.ndarray, pre: Sequence[int], dilation: Sequence[int], size: Sequence[int], groups: int
) -> np.ndarray:
    """dx[i] = sum_r dy[i + pre - d r] w[r]: the forward conv of dy with w flipped, padded d(R-1) - pre
    before and X - O + pre after, negative paddings cropping dy instead."""
    k, cg, *kernel = w.shape
    spatial = len(kernel)
    flipped = np.flip(w, axis=tuple(range(2, 2 + spatial)))
    wt = flipped.reshape(groups, k // groups, cg, *kernel).swapaxes(1, 2).reshape(groups * cg, k // groups, *kernel)
    crop = [slice(None), slice(None)]
    before, after = [], []
    for x_len, o_len, r, d, p in zip(size, dy.shape[2:], kernel, dilation, pre):
        lo, hi = d * (r - 1) - p, x_len - o_len + p
        crop.append(slice(max(0, -lo), o_len - max(0, -hi)))
        before.append(max(0, lo))
        after.append(max(0, hi))
    return conv_forward(dy[tuple(crop)], wt, before, after, (1,) * spatial, dilation)


def conv_wgrad(
    x: np.ndarray,
    dy: np.ndarray,
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    w_dims: Sequence[int],
) -> np.ndarray:
    """dw (w_dims = K, C/G, *R) for float64 x (N, C, *S) and dy (N, K, *out); G = C // w_dims[1]."""
    n, c, *size = x.shape
    k, cg, *kernel = w_dims
    out = list(dy.shape[2:])
    _check_out(size, out, (pre_padding, post_padding, stride, dilation), kernel)
    groups = c // cg
    taps = math.prod(kernel)
    last = channels_last(x)
    view = windows(pad(x, pre_padding, post_padding, last=last), groups, kernel, stride, dilation, out)
    row_bytes = c * taps * 8
    target = chunk_bytes(row_bytes)
    scratch = np.empty(max(target, row_bytes * math.prod(out[1:])) // 8)
    dw: np.ndarray | None = None
    for batch, rows in row_chunks(n, out, row_bytes, target):
        cols = columns(view[batch, :, :, rows], last, scratch)
        grad = _gradient_matrix(dy, groups, batch, rows, last)
        part = np.matmul(cols.transpose(0, 2, 1), grad) if last else np.matmul(grad, cols.transpose(0, 2, 1))
        if dw is None:
            dw = part
        else:
            dw += part
    assert dw is not None  # row_chunks yields at least one chunk
    if last:  # (G, taps*C/G, K/G) -> (G, K/G, C/G, taps)
        return dw.reshape(groups, taps, cg, k // groups).transpose(0, 3, 2, 1).reshape(k, cg, *kernel)
    return dw.reshape(k, cg, *kernel)
