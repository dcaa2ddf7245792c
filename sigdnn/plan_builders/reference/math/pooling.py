"""Pooling (max; average counting padding or not), forward and backward, in float64.

Windows as in convolution: output o covers input o*stride + r*dilation - pre
for each tap r of the window, out = floor((S + pre + post - span) / stride) + 1.
Padding is never a value: max takes the maximum of the real elements
(padding enters as -inf), average_count_include_pad divides the sum of the
real elements by the window size, average_count_exclude_pad by the number of
real elements in the window.

Max ties and NaN follow torch's CPU kernels, which scan a window in
row-major tap order starting from its first real element and take a new
maximum when it is greater or NaN: the gradient goes to the first maximum
in that order (the last NaN when there are NaNs), and a window holding only
-inf passes it to its first real element.

The work is one elementwise pass per tap over strided window views
(windows.py), never a loop over elements.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

from sigdnn.plan_builders.reference.math.parallel import ieee
from sigdnn.plan_builders.reference.math.windows import channels_last, empty_like_layout, out_size, pad, windows

MODES = ("max", "average_count_include_pad", "average_count_exclude_pad")


def _setup(
    shape: Sequence[int],
    window: Sequence[int],
    pre: Sequence[int],
    post: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int] | None,
    mode: str,
) -> tuple[list[int], tuple[int, ...], list[tuple[int, ...]]]:
    if mode not in MODES:
        raise ValueError(f"pooling mode {mode!r} is not one of {', '.join(MODES)}")
    dil = tuple(dilation) if dilation is not None else (1,) * len(window)
    out = [out_size(*a) for a in zip(shape[2:], pre, post, window, stride, dil)]
    taps = list(itertools.product(*(range(r) for r in window)))
    return out, dil, taps


def _real_counts(
    size: Sequence[int],
    window: Sequence[int],
    pre: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
    out: Sequence[int],
) -> np.ndarray:
    """Real (non-padding) elements of each window, shaped (1, 1, *out): a product of per-axis counts."""
    count = np.ones([1, 1] + [1] * len(out))
    for axis, (s, r, p, st, d, o) in enumerate(zip(size, window, pre, stride, dilation, out)):
        pos = np.arange(o)[:, None] * st + np.arange(r)[None, :] * d - p
        per = ((pos >= 0) & (pos < s)).sum(axis=1).astype(np.float64)
        shape = [1] * (2 + len(out))
        shape[2 + axis] = o
        count = count * per.reshape(shape)
    return count


def _real_tap(
    size: Sequence[int], tap: Sequence[int], pre: Sequence[int], stride: Sequence[int], dilation: Sequence[int], out
) -> np.ndarray:
    """Whether tap ``tap`` of each window is a real element: (1, 1, *out) booleans."""
    mask = np.ones([1, 1] + [1] * len(out), dtype=bool)
    for axis, (s, r, p, st, d, o) in enumerate(zip(size, tap, pre, stride, dilation, out)):
        pos = np.arange(o) * st + r * d - p
        shape = [1] * (2 + len(out))
        shape[2 + axis] = o
        mask = mask & ((pos >= 0) & (pos < s)).reshape(shape)
    return mask


@ieee
def pooling_forward(
    x: np.ndarray,
    mode: str,
    window: Sequence[int],
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int] | None = None,
) -> np.ndarray:
    """y (N, C, *out) for float64 x (N, C, *S)."""
    out, dil, taps = _setup(x.shape, window, pre_padding, post_padding, stride, dilation, mode)
    fill = -np.inf if mode == "max" else 0.0
    view = windows(pad(x, pre_padding, post_padding, fill), 1, window, stride, dil, out)[:, 0]
    y = empty_like_layout((*x.shape[:2], *out), channels_last(x))
    np.copyto(y, view[(Ellipsis, *taps[0])])
    for tap in taps[1:]:
        part = view[(Ellipsis, *tap)]
        if mode == "max":
            np.maximum(y, part, out=y)  # NaN propagates, as in torch
        else:
            y += part
    if mode == "average_count_include_pad":
        y /= math.prod(window)
    elif mode == "average_count_exclude_pad":
        y /= _real_counts(x.shape[2:], window, pre_padding, stride, dil, out)
    return y


@ieee
def pooling_backward(
    dy: np.ndarray,
    x: np.ndarray,
    mode: str,
    window: Sequence[int],
    pre_padding: Sequence[int],
    post_padding: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int] | None = None,
) -> np.ndarray:
    """dx (x's dims) for dy (N, C, *out); x is read by max pooling only (where each maximum was)."""
    out, dil, taps = _setup(x.shape, window, pre_padding, post_padding, stride, dilation, mode)
    if list(dy.shape[2:]) != out or dy.shape[:2] != x.shape[:2]:
        raise ValueError(f"pooling backward: dy {dy.shape} is not the pooled shape {(*x.shape[:2], *out)}")
    last = channels_last(dy)
    padded = [s + a + b for s, a, b in zip(x.shape[2:], pre_padding, post_padding)]
    dxp = empty_like_layout((*x.shape[:2], *padded), last)
    dxp[...] = 0.0
    grad_view = windows(dxp, 1, window, stride, dil, out, writeable=True)[:, 0]
    if mode == "max":
        x_view = windows(pad(x, pre_padding, post_padding, -np.inf), 1, window, stride, dil, out)[:, 0]
        best = np.full(dy.shape, -np.inf)
        chosen = np.full(dy.shape, -1, dtype=np.int64)
        for t, tap in enumerate(taps):
            value = x_view[(Ellipsis, *tap)]
            real = _real_tap(x.shape[2:], tap, pre_padding, stride, dil, out)
            take = real & ((value > best) | np.isnan(value) | (chosen < 0))
            np.copyto(best, value, where=take)
            np.copyto(chosen, t, where=take)
        for t, tap in enumerate(taps):
            dest = grad_view[(Ellipsis, *tap)]
            np.add(dest, dy, out=dest, where=chosen == t)
    else:
        share = dy / (
            math.prod(window)
            if mode == "average_count_include_pad"
            else _real_counts(x.shape[2:], window, pre_padding, stride, dil, out)
        )
        for tap in taps:
            dest = grad_view[(Ellipsis, *tap)]
            dest += share
    interior = tuple(slice(a, a + s) for a, s in zip(pre_padding, x.shape[2:]))
    return dxp[(slice(None), slice(None), *interior)]
