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
from sigdnn.plan_builders.reference.math.sink import Sink, wide
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
    y: Sink | None = None,
) -> np.ndarray | None:
    """y (N, K, *out) for x (N, C, *S) and w (K, C/G, *R); G = C // w.shape[1].

    x may be float16 / float32: it is widened exactly where it is copied
    anyway (padding, im2col columns), or an image at a time for a 1x1 GEMM
    on x itself. With a Sink, each chunk of y is rounded straight into it
    and the result comes back None (no float64 copy of y).
    """
    n, c, *size = x.shape
    w = wide(w)
    k, cg, *kernel = w.shape
    groups = c // cg
    out = [out_size(*a) for a in zip(size, pre_padding, post_padding, kernel, stride, dilation)]
    last = channels_last(x)
    wm = weight_matrix(w, groups, last)
    pointwise = (
        math.prod(kernel) == 1 and all(s == 1 for s in stride) and not any(pre_padding) and not any(post_padding)
    )
    result = _Output(y, (n, k, *out), last)
    if pointwise and _pointwise_in_place(x, wm, groups, last, result):
        return result.finish()
    view = windows(pad(x, pre_padding, post_padding, last=last), groups, kernel, stride, dilation, out)
    row_bytes = c * math.prod(kernel) * 8
    target = chunk_bytes(row_bytes)
    scratch = np.empty(max(target, row_bytes * math.prod(out[1:])) // 8)
    for batch, rows in row_chunks(n, out, row_bytes, target):
        cols = columns(view[batch, :, :, rows], last, scratch)
        ymat = result.chunk(batch, rows, groups)
        if last and groups == 1:
            np.matmul(cols[0], wm[0], out=ymat[:, 0])
        elif last:
            ymat[...] = np.matmul(cols, wm).transpose(1, 0, 2)
        else:
            np.matmul(wm, cols, out=ymat)
        result.done(batch, rows)
        del ymat  # else this chunk's float64 block stays alive while the next one is allocated
    return result.finish()


class _Output:
    """Where conv_forward's GEMMs write y, a chunk (batch slice, out[0] slice) at a time.

    Without a sink: one float64 y stored (n, *out, K) for channels-last x,
    (K, n, *out) otherwise, each chunk's GEMM writing its slice in place. With
    a sink: each chunk's GEMM writes a float64 chunk temporary, rounded into
    the sink's array as soon as it is done.
    """

    def __init__(self, sink: Sink | None, dims: tuple[int, ...], last: bool) -> None:
        self._sink = sink
        self._dims = dims
        self._last = last
        self._pending: np.ndarray | None = None
        n, k, *out = dims
        if sink is not None:
            self._full = None
        elif last:
            self._full = np.empty((n, *out, k))
        else:
            self._full = np.empty((k, n, *out))

    def _stored(self, block: np.ndarray) -> np.ndarray:
        """A block in stored order ((n, *out, K) or (K, n, *out)) as logical (n, K, *out)."""
        return np.moveaxis(block, -1, 1) if self._last else np.moveaxis(block, 0, 1)

    def chunk(self, batch: slice, rows: slice, groups: int) -> np.ndarray:
        """The GEMM destination of a chunk: (positions, G, K/G) channels-last, else (G, K/G, positions)."""
        n, k, *out = self._dims
        if self._full is not None:
            block = self._full[batch, rows] if self._last else self._full[:, batch, rows]
        else:
            nb = len(range(n)[batch])
            rb = len(range(out[0])[rows])  # convs have 1 to 3 spatial axes
            shape = (nb, rb, *out[1:], k) if self._last else (k, nb, rb, *out[1:])
            block = self._pending = np.empty(shape)
        if self._last:
            return block.reshape(-1, groups, k // groups)
        return block.reshape(groups, k // groups, -1)

    def done(self, batch: slice, rows: slice) -> None:
        """The chunk's GEMM has run: round it into the sink (nothing to do for the float64 y)."""
        if self._sink is not None and self._pending is not None:
            self._sink.store(self._sink.array[batch, :, rows], self._stored(self._pending))
            self._pending = None

    def image(self, i: int) -> np.ndarray:
        """Image i's GEMM destination for a 1x1 conv: (*out, K) channels-last, else (K, *out)."""
        k, out = self._dims[1], self._dims[2:]
        if self._full is not None:
            return self._full[i] if self._last else self._full[:, i]
        self._pending = np.empty((*out, k) if self._last else (k, *out))
        return self._pending

    def image_done(self, i: int) -> None:
        if self._sink is not None and self._pending is not None:
            block = np.moveaxis(self._pending, -1, 0) if self._last else self._pending
            self._sink.store(self._sink.array[i], block)
            self._pending = None

    def finish(self) -> np.ndarray | None:
        """y (N, K, *out) in float64 without a sink; None once the sink holds it."""
        return None if self._full is None else self._stored(self._full)


def _pointwise_in_place(x: np.ndarray, wm: np.ndarray, groups: int, last: bool, y: _Output) -> bool:
    """A 1x1, stride-1, unpadded conv as one GEMM per image on x itself (widened an image at a time when
    narrow); False when x's strides need a copy (the im2col path then runs)."""
    n, c = x.shape[:2]
    k = wm.shape[2] * groups if last else wm.shape[1] * groups
    cg = c // groups
    if last:
        rows = merge_axes(np.moveaxis(x, 1, -1), 1, x.ndim - 1)  # (N, P, C)
        if rows is None:
            return False
        for i in range(n):
            dest = y.image(i).reshape(-1, groups, k // groups)
            image = wide(rows[i])
            if groups == 1:
                np.matmul(image, wm[0], out=dest[:, 0])
            else:
                dest[...] = np.matmul(image.reshape(-1, groups, cg).transpose(1, 0, 2), wm).transpose(1, 0, 2)
            y.image_done(i)
            del dest, image  # else both stay alive while the next image's are allocated
        return True
    planes = merge_axes(x, 2, x.ndim)  # (N, C, P)
    if planes is None or planes.shape[2] < 64:  # tiny planes: the chunked path folds the batch
        return False
    for i in range(n):
        np.matmul(wm, wide(planes[i]).reshape(groups, cg, -1), out=y.image(i).reshape(groups, k // groups, -1))
        y.image_done(i)
    return True
