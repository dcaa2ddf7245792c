"""Strides: packed strides for a named layout or a reference stride order."""

from __future__ import annotations

from collections.abc import Sequence

LAYOUTS = ("NCHW", "NHWC", "NCDHW", "NDHWC", "NCW", "NWC", "ROW_MAJOR")


def packed_strides(dims: Sequence[int], order: Sequence[int] | None = None) -> tuple[int, ...]:
    """Packed strides; ``order`` lists dims from outermost to innermost."""
    order = range(len(dims)) if order is None else order
    strides = [0] * len(dims)
    step = 1
    for axis in reversed(list(order)):
        strides[axis] = step
        step *= max(int(dims[axis]), 1)
    return tuple(strides)


def layout_order(layout: str, rank: int) -> tuple[int, ...]:
    """Axis order (outermost first) of a layout name, for logical N,C,spatial dims."""
    name = layout.upper()
    if name not in LAYOUTS:
        raise ValueError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    channels_last = name in ("NHWC", "NDHWC", "NWC")
    if name != "ROW_MAJOR" and rank != len(name):
        raise ValueError(f"layout {layout} needs rank {len(name)}, dims have rank {rank}")
    if channels_last:
        return (0, *range(2, rank), 1)
    return tuple(range(rank))


def stride_order(strides: Sequence[int]) -> tuple[int, ...]:
    """Axes from outermost to innermost, by descending stride (stable)."""
    return tuple(sorted(range(len(strides)), key=lambda a: -strides[a]))


def packed_like(dims: Sequence[int], like_strides: Sequence[int]) -> tuple[int, ...]:
    """Packed strides for ``dims`` in the axis order of ``like_strides``."""
    if len(like_strides) != len(dims):
        return packed_strides(dims)
    return packed_strides(dims, stride_order(like_strides))


def span_elements(dims: Sequence[int], strides: Sequence[int]) -> int:
    """Elements from the first to one past the last element a view touches."""
    return 1 + sum((d - 1) * s for d, s in zip(dims, strides))


def is_non_overlapping(dims: Sequence[int], strides: Sequence[int], itemsize: int = 1) -> bool:
    """True when no two logical indices share memory (strides in units of ``itemsize``)."""
    strides = [abs(s) for s in strides]
    extent = itemsize
    for axis in reversed(stride_order(strides)):
        if dims[axis] == 1:
            continue
        if strides[axis] < extent:
            return False
        extent = strides[axis] * dims[axis]
    return True
