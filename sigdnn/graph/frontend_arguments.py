"""Argument normalization shared by the frontend's op methods: cuDNN's spellings to the ops' attributes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sigdnn.errors import GraphError
from sigdnn.graph.arguments import ints, real
from sigdnn.graph.tensor import Tensor


def conv_arguments(
    where: str,
    spatial: int,
    padding: Sequence[int] | None,
    pre_padding: Sequence[int] | None,
    post_padding: Sequence[int] | None,
    stride: Sequence[int] | None,
    dilation: Sequence[int] | None,
) -> dict[str, tuple[int, ...]]:
    """cuDNN's convolution arguments: ``padding`` or (``pre_padding``, ``post_padding``), stride, dilation."""
    if padding is not None and (pre_padding is not None or post_padding is not None):
        raise GraphError(f"{where}: give padding or pre_padding/post_padding, not both")
    zeros, ones = (0,) * spatial, (1,) * spatial
    return {
        "pre_padding": ints(padding if padding is not None else pre_padding or zeros, f"{where} padding"),
        "post_padding": ints(padding if padding is not None else post_padding or zeros, f"{where} padding"),
        "stride": ints(stride or ones, f"{where} stride"),
        "dilation": ints(dilation or ones, f"{where} dilation"),
    }


def rank_of(t: Any) -> int:
    """A tensor argument's rank, 0 for anything else (add_node then names the bad argument)."""
    return len(t.dims) if isinstance(t, Tensor) else 0


def parameter_value(value: Any, what: str) -> float:
    """A float attribute from a number or a pass-by-value scalar tensor (cuDNN passes epsilon and friends as tensors)."""
    if isinstance(value, Tensor):
        if value.value is None or value.dtype is None:
            raise GraphError(
                f"{what}: tensor '{value.name}' is not a pass-by-value scalar; give a value or g.scalar(...)"
            )
        return real(value.scalar(), what)
    return real(value, what)


def window_arguments(
    where: str,
    spatial: int,
    window: Sequence[int],
    stride: Sequence[int] | None,
    padding: Sequence[int] | None,
    pre_padding: Sequence[int] | None,
    post_padding: Sequence[int] | None,
) -> dict[str, tuple[int, ...]]:
    """Pooling's arguments: the window, its stride (default: the window) and padding as in conv_arguments."""
    conv = conv_arguments(where, spatial, padding, pre_padding, post_padding, stride or window, None)
    del conv["dilation"]
    return {"window": ints(window, f"{where} window"), **conv}


def slice_bounds(where: str, x: Any, slices: Sequence[slice]) -> dict[str, tuple[int, ...]]:
    """Python slices (one per leading axis; missing ones take the whole axis), normalized as Python does."""
    dims = x.dims if isinstance(x, Tensor) else ()
    if isinstance(slices, slice) or len(slices) > len(dims):
        raise GraphError(f"{where}: give a list of at most {len(dims)} slices (one per axis), got {slices!r}")
    bounds = []
    for axis, d in enumerate(dims):
        item = slices[axis] if axis < len(slices) else slice(None)
        if not isinstance(item, slice):
            raise GraphError(f"{where}: axis {axis}: {item!r} is not a slice")
        try:
            bounds.append(item.indices(d))
        except (TypeError, ValueError) as e:
            raise GraphError(f"{where}: axis {axis}: bad slice {item!r}: {e}") from None
    start, limit, step = zip(*bounds) if bounds else ((), (), ())
    return {"start_indices": start, "limit_indices": limit, "strides": step}


def axis_list(where: str, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """Axes in increasing order, negative ones counted from the end (duplicates are left for the op to refuse)."""
    if isinstance(axes, int):
        axes = (axes,)
    values = ints(axes, f"{where} axes")
    return tuple(sorted(a + rank if a < 0 else a for a in values))
