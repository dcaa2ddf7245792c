"""Host-made index maps of sliding windows: which input position each (output position, tap) reads.

Convolution and pooling windows along each spatial axis: output o, tap r
reads input o * stride + r * dilation - pre_padding, or nothing (-1) when
that falls in the padding. ``forward`` gives the map per output position,
``inverse`` the same relation seen from the input side (per input position
and tap: the output whose window put that tap there), which is what the
backward passes gather by. Positions are flat over the spatial axes, in
row-major order.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def out_size(size: int, pre: int, post: int, kernel: int, stride: int, dilation: int) -> int:
    """Output length along one axis (a partial last window is dropped)."""
    return (size + pre + post - dilation * (kernel - 1) - 1) // stride + 1


def _combine(per_axis: list[np.ndarray], sizes: Sequence[int]) -> np.ndarray:
    """Per-axis maps (positions, taps) -> one map (flat positions, flat taps) over all axes, -1 where
    any axis is -1."""
    spatial = len(per_axis)
    total = np.zeros((1,) * (2 * spatial), np.int64)
    invalid = np.zeros(total.shape, bool)
    for axis, m in enumerate(per_axis):
        shape = [1] * (2 * spatial)
        shape[axis], shape[spatial + axis] = m.shape
        part = m.reshape(shape)
        total = total + part * math.prod(sizes[axis + 1 :])
        invalid = invalid | (part < 0)
    flat = np.where(invalid, -1, total)
    positions = math.prod(flat.shape[:spatial])
    return flat.reshape(positions, -1)


def forward(
    size: Sequence[int],
    kernel: Sequence[int],
    pre: Sequence[int],
    post: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
) -> np.ndarray:
    """(outputs, taps): the flat input position each output's tap reads, -1 in the padding."""
    per_axis = []
    for s, r, a, b, st, d in zip(size, kernel, pre, post, stride, dilation, strict=True):
        o = np.arange(out_size(s, a, b, r, st, d))[:, None]
        position = o * st + np.arange(r)[None, :] * d - a
        per_axis.append(np.where((position >= 0) & (position < s), position, -1))
    return _combine(per_axis, list(size))


def inverse(
    size: Sequence[int],
    out: Sequence[int],
    kernel: Sequence[int],
    pre: Sequence[int],
    stride: Sequence[int],
    dilation: Sequence[int],
) -> np.ndarray:
    """(inputs, taps): the flat output position whose tap lands on each input position, -1 for none."""
    per_axis = []
    for s, o, r, a, st, d in zip(size, out, kernel, pre, stride, dilation, strict=True):
        numerator = np.arange(s)[:, None] + a - np.arange(r)[None, :] * d
        hit = (numerator % st == 0) & (numerator >= 0) & (numerator // st < o)
        per_axis.append(np.where(hit, numerator // st, -1))
    return _combine(per_axis, list(out))
