"""Resampling (nearest and (bi/tri)linear interpolation) forward and backward, in float64.

cuDNN's resample takes the interpolation modes but documents neither where
the samples fall nor how linear interpolation weighs them, so sigdnn fixes
the convention torch.nn.functional.interpolate documents, per spatial axis
with input size I, output size O and f = I / O (or 1 / scale when a scale is
given, as torch uses a given scale_factor):

  coordinates     source position of output o       torch equivalent
  half_pixel      (o + 0.5) * f - 0.5  (>= 0)        align_corners=False; nearest: "nearest-exact"
  align_corners   o * (I - 1) / (O - 1)  (0 if O=1)  align_corners=True (linear only)
  asymmetric      o * f                               nearest: "nearest"

nearest takes input floor(position + 0.5) for half_pixel, i.e.
floor((o + 0.5) * f), and floor(o * f) for asymmetric, clamped to I - 1.
linear blends inputs i0 = floor(position) and min(i0 + 1, I - 1) with
weights 1 - t and t, t = position - i0; in several dims it is the tensor
product (bilinear, trilinear). Without scales, positions are computed
exactly in rational arithmetic (torch rounds them to float or double first,
which can move a nearest sample across an exact integer boundary).

Both passes are separable: one gather (forward) or one sorted segment sum
(backward) per spatial axis. The axes that shrink go first: the tensor
between two passes then never outgrows the larger of input and output
(growing one axis before shrinking another could make it their product).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sigdnn.plan_builders.reference.math.parallel import ieee

MODES = ("nearest", "bilinear")
COORDINATES = ("half_pixel", "align_corners", "asymmetric")


def _position(
    o: np.ndarray, size: int, out: int, scale: float | None, coordinates: str
) -> tuple[np.ndarray, np.ndarray]:
    """Source positions of outputs o as (floor, fraction), exact when no scale is given."""
    if scale is not None:
        f = 1.0 / scale
        if coordinates == "align_corners":
            pos = o * ((size - 1) / (out - 1) if out > 1 else 0.0)
        else:
            pos = (o + 0.5) * f - 0.5 if coordinates == "half_pixel" else o * f
        pos = np.maximum(pos, 0.0)
        low = np.floor(pos)
        return low.astype(np.int64), pos - low
    if coordinates == "half_pixel":
        num, den = (2 * o + 1) * size - out, 2 * out
    elif coordinates == "align_corners":
        num, den = o * (size - 1), max(out - 1, 1)
    else:
        num, den = o * size, out
    num = np.maximum(num, 0)
    low = num // den
    return low, (num - low * den) / den


def _samples(
    size: int, out: int, mode: str, scale: float | None, coordinates: str
) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """Per axis: [(input index per output, weight or None)], one pair for nearest, two for linear."""
    o = np.arange(out, dtype=np.int64)
    if mode == "nearest":
        if scale is not None:
            f = 1.0 / scale
            base = (o + 0.5) * f if coordinates == "half_pixel" else o * f
            index = np.floor(base).astype(np.int64)
        elif coordinates == "half_pixel":
            index = (2 * o + 1) * size // (2 * out)
        else:
            index = o * size // out
        return [(np.minimum(index, size - 1), None)]
    low, t = _position(o, size, out, scale, coordinates)
    low = np.minimum(low, size - 1)
    return [(low, 1.0 - t), (np.minimum(low + 1, size - 1), t)]


def _check(mode: str, coordinates: str, spatial: int, scales: Sequence[float] | None) -> None:
    if mode not in MODES:
        raise ValueError(f"resample mode {mode!r} is not one of {', '.join(MODES)}")
    if coordinates not in COORDINATES:
        raise ValueError(f"resample coordinates {coordinates!r} are not one of {', '.join(COORDINATES)}")
    if mode == "nearest" and coordinates == "align_corners":
        raise ValueError("nearest resampling has no align_corners convention (use half_pixel or asymmetric)")
    if scales is not None and (len(scales) != spatial or any(not s > 0 for s in scales)):
        raise ValueError(f"resample scales {list(scales)} must be {spatial} positive numbers")


def _shrinking_first(sizes: Sequence[int], targets: Sequence[int]) -> list[int]:
    """Spatial axis indices ordered by target / size, smallest first."""
    return sorted(range(len(sizes)), key=lambda i: targets[i] / sizes[i])


def _along(shape: tuple[int, ...], axis: int, values: np.ndarray) -> np.ndarray:
    """A per-position vector of one axis, shaped to broadcast along that axis."""
    dims = [1] * len(shape)
    dims[axis] = values.size
    return values.reshape(dims)


@ieee
def resample(
    x: np.ndarray,
    mode: str,
    out_dims: Sequence[int],
    scales: Sequence[float] | None = None,
    coordinates: str = "half_pixel",
) -> np.ndarray:
    """y (out_dims = N, C, *O) resampled from float64 x (N, C, *S)."""
    spatial = x.ndim - 2
    _check(mode, coordinates, spatial, scales)
    if tuple(out_dims[:2]) != x.shape[:2] or len(out_dims) != x.ndim:
        raise ValueError(f"resample output dims {list(out_dims)} do not keep x's N, C {x.shape[:2]}")
    y = x
    for i in _shrinking_first(x.shape[2:], out_dims[2:]):
        axis = 2 + i
        samples = _samples(x.shape[axis], out_dims[axis], mode, scales[i] if scales else None, coordinates)
        parts = [np.take(y, index, axis=axis) for index, _ in samples]
        if mode == "nearest":
            y = parts[0]
        else:
            (_, w0), (_, w1) = samples
            y = parts[0] * _along(parts[0].shape, axis, w0) + parts[1] * _along(parts[1].shape, axis, w1)
    return y if y is not x else x.copy()


def _segment_sum(values: np.ndarray, index: np.ndarray, size: int, axis: int) -> np.ndarray:
    """out[..., i, ...] = sum of values[..., o, ...] with index[o] == i, along ``axis``; index sorted."""
    shape = list(values.shape)
    shape[axis] = size
    if values.shape[axis] == 0:
        return np.zeros(shape)
    present, starts = np.unique(index, return_index=True)
    sums = np.add.reduceat(values, starts, axis=axis)
    out = np.zeros(shape)
    target = [slice(None)] * len(shape)
    target[axis] = present
    out[tuple(target)] = sums
    return out


@ieee
def resample_backward(
    dy: np.ndarray,
    x_dims: Sequence[int],
    mode: str,
    scales: Sequence[float] | None = None,
    coordinates: str = "half_pixel",
) -> np.ndarray:
    """dx (x_dims) for dy (N, C, *O): the adjoint of resample, each output's gradient sent back
    to the inputs it was sampled from with the same weights."""
    spatial = len(x_dims) - 2
    _check(mode, coordinates, spatial, scales)
    if tuple(dy.shape[:2]) != tuple(x_dims[:2]) or dy.ndim != len(x_dims):
        raise ValueError(f"resample backward: dy {dy.shape} does not keep x's N, C {tuple(x_dims[:2])}")
    g = dy
    for i in _shrinking_first(dy.shape[2:], x_dims[2:]):
        axis = 2 + i
        samples = _samples(x_dims[axis], dy.shape[axis], mode, scales[i] if scales else None, coordinates)
        total = None
        for index, weight in samples:
            part = g if weight is None else g * _along(g.shape, axis, weight)
            part = _segment_sum(part, index, x_dims[axis], axis)
            total = part if total is None else total + part
        g = total
    return g if g is not dy else dy.copy()
