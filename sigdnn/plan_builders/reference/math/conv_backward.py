"""Convolution backward in float64: data gradient (dgrad) and weight gradient (wgrad).

Both are the adjoints of conv_forward's im2col GEMM, with the same
orientation rule (by the memory layout of the big operand) and the same
cache-sized chunks of output positions, the batch folded into each GEMM:

* dgrad by phases: dx splits into prod(stride) residue classes (dx[rho +
  stride*i]); each is a stride-1 forward convolution of dy with the taps
  that reach it, reversed, channel axes swapped per group (class _Phase
  says which and how it is padded). So dgrad runs at conv_forward's speed,
  and a 1x1 one is a single GEMM on dy in place. Its im2col copies dy (K
  channels) where the scatter below writes columns of C channels: phases
  are taken unless K > C (a stem layer: C = 3, K = 64).
* dgrad by scatter: columns = w^T dy, one GEMM per chunk, then each kernel
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

import attrs
import numpy as np

from sigdnn.plan_builders.reference.math.conv_forward import conv_forward
from sigdnn.plan_builders.reference.math.parallel import ieee
from sigdnn.plan_builders.reference.math.sink import Sink, wide
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

_MIN_CHANNEL_RUN = 16  # fewer channels per group than this: the scatter accumulates channels first


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


@ieee
def conv_dgrad(
    dy: np.ndarray,
    w: np.ndarray,
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    x_dims: Sequence[int],
    dx: Sink | None = None,
) -> np.ndarray | None:
    """dx (x_dims = N, C, *S) for dy (N, K, *out) and w (K, C/G, *R); G = C // w.shape[1].

    dy may be float16 / float32 (widened where conv_forward or a GEMM reads
    it). With a Sink, dx is rounded into it (phase by phase, or once from the
    scatter's float64 accumulator) and None comes back.
    """
    w = wide(w)
    c, *size = x_dims[1:]
    k, cg, *kernel = w.shape
    _check_out(size, dy.shape[2:], (pre_padding, post_padding, stride, dilation), kernel)
    groups = c // cg
    if math.prod(kernel) == 1 or k <= c:
        return _dgrad_by_phases(dy, w, pre_padding, stride, dilation, x_dims, groups, dx)
    result = _dgrad_by_scatter(dy, w, pre_padding, post_padding, stride, dilation, x_dims, groups)
    if dx is None:
        return result
    dx.store(dx.array, result)
    return None


def _dgrad_by_scatter(
    dy: np.ndarray,
    w: np.ndarray,
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    x_dims: Sequence[int],
    groups: int,
) -> np.ndarray:
    """dx by columns = w^T dy and a scatter-add of each tap's columns (see the module docstring)."""
    n, c, *size = x_dims
    cg, *kernel = w.shape[1:]
    out = list(dy.shape[2:])
    taps = list(itertools.product(*(range(r) for r in kernel)))
    last = channels_last(dy)
    wt = weight_matrix(w, groups, last).transpose(0, 2, 1)  # (G, K/G, taps*C/G) or (G, C/G*taps, K/G)
    padded = [s + a + b for s, a, b in zip(size, pre_padding, post_padding)]
    # The accumulator's layout changes no sum (each element takes its taps in the same order), only the
    # adds' inner loops: channels last, they run over a group's C/G channels, too short a run when few.
    dxp = empty_like_layout((n, c, *padded), last and cg >= _MIN_CHANNEL_RUN)
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


@attrs.frozen
class _Phase:
    """One residue class rho of dx along one axis (dx[rho + s*i]) and the taps that reach it.

    dx[rho + s i] = sum over taps r with s | (rho + pre - d r) of dy[i + (rho + pre - d r) / s] w[r].
    Those taps are r = first + j * step, j < count (step = s / gcd(s, d)), reading dy at
    i + offset - j * gap (gap = d / gcd(s, d)): a stride-1 forward conv of dy with them reversed,
    dilation gap, padded gap*(count-1) - offset before and out_len - O + offset after.
    """

    rho: int
    first: int
    count: int
    step: int
    gap: int
    offset: int
    out_len: int

    @classmethod
    def of(cls, rho: int, size: int, pre: int, kernel: int, stride: int, dilation: int) -> _Phase:
        g = math.gcd(stride, dilation)
        first = next((r for r in range(min(kernel, stride // g)) if (rho + pre - dilation * r) % stride == 0), kernel)
        step = stride // g
        count = max(0, -(-(kernel - first) // step))
        offset = (rho + pre - dilation * first) // stride if count else 0
        return cls(rho, first, count, step, dilation // g, offset, max(0, -(-(size - rho) // stride)))

    def taps(self) -> slice:
        """The kernel positions of the taps, last first (the forward conv reads them reversed)."""
        last = self.first + (self.count - 1) * self.step
        return slice(last, self.first - 1 if self.first else None, -self.step)

    def padding(self, o_len: int) -> tuple[int, int]:
        return self.gap * (self.count - 1) - self.offset, self.out_len - o_len + self.offset


def _dgrad_by_phases(
    dy: np.ndarray,
    w: np.ndarray,
    pre: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    x_dims: Sequence[int],
    groups: int,
    sink: Sink | None,
) -> np.ndarray | None:
    """dx as prod(stride) stride-1 forward convs of dy, one per residue class, written strided into dx
    (into the sink's array, each class rounded there by its conv, when there is a sink)."""
    k, cg, *kernel = w.shape
    spatial = len(kernel)
    swapped = w.reshape(groups, k // groups, cg, *kernel).swapaxes(1, 2).reshape(groups * cg, k // groups, *kernel)
    dx = empty_like_layout(x_dims, channels_last(dy)) if sink is None else sink.array
    per_axis = [
        [_Phase.of(rho, x_len, p, r, st, d) for rho in range(st)]
        for x_len, p, r, st, d in zip(x_dims[2:], pre, kernel, stride, dilation)
    ]
    for phases in itertools.product(*per_axis):
        where = (slice(None), slice(None), *(slice(ph.rho, None, st) for ph, st in zip(phases, stride)))
        if any(ph.out_len == 0 for ph in phases):
            continue
        if any(ph.count == 0 for ph in phases):
            dx[where] = 0.0
            continue
        crop, before, after = [slice(None), slice(None)], [], []
        for ph, o_len in zip(phases, dy.shape[2:]):
            lo, hi = ph.padding(o_len)
            crop.append(slice(max(0, -lo), o_len - max(0, -hi)))
            before.append(max(0, lo))
            after.append(max(0, hi))
        if any(c.stop <= c.start for c in crop[2:]):
            dx[where] = 0.0  # every tap of this class reads padding only
            continue
        sub = swapped[(slice(None), slice(None), *(ph.taps() for ph in phases))]
        geometry = (before, after, (1,) * spatial, tuple(ph.gap for ph in phases))
        if sink is None:
            dx[where] = conv_forward(dy[tuple(crop)], sub, *geometry)
        else:
            conv_forward(dy[tuple(crop)], sub, *geometry, Sink(dx[where], sink.store, sink.casts))
    return None if sink is not None else dx


@ieee
def conv_wgrad(
    x: np.ndarray,
    dy: np.ndarray,
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    w_dims: Sequence[int],
) -> np.ndarray:
    """dw (w_dims = K, C/G, *R) for x (N, C, *S) and dy (N, K, *out); G = C // w_dims[1].

    x and dy may be float16 / float32: x widens in its padding / im2col copy,
    dy where a chunk's GEMM reads it.
    """
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
