"""The cuTile emulator's loads, stores, gathers and scatters: what a tile reads from and writes to an array.

cuTile's semantics as the emulator's docstring states them: reads outside an array give the padding value,
writes outside it are dropped, and a store refuses a float32 tile for a 16- or 8-bit float array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from sigdnn.plan_builders.cutile.emulator_dtypes import is_bfloat16, to_dtype


class TileArray(np.ndarray):
    """A kernel's array argument: its NumPy view, which also answers cuTile's ``Array.slice``."""

    def slice(self, axis: int, start: Any, stop: Any) -> TileArray:
        """A view of elements ``start`` .. ``stop`` - 1 along ``axis`` (a dynamic offset into the array); cuTile
        requires 0 <= start < N and start <= stop <= N."""
        n = self.shape[axis]
        start, stop = int(start), int(stop)
        if not (0 <= start < n and start <= stop <= n):
            raise IndexError(
                f"Array.slice({start}, {stop}) of an axis of {n}: needs 0 <= start < N, start <= stop <= N"
            )
        index: list[Any] = [slice(None)] * self.ndim
        index[axis] = slice(start, stop)
        return self[tuple(index)]


def tile_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """A tile's extents, each a power of two as cuTile assumes of every tile shape (its compiler refuses others)."""
    extents = tuple(int(n) for n in shape)
    if any(n < 1 or n & (n - 1) for n in extents):
        raise ValueError(f"tile shape {extents}: every extent must be a power of two")
    return extents


def _inside(array: np.ndarray, i: int, n: int, check_bounds: bool) -> None:
    """An unchecked access must be in bounds (on the GPU it would read or write past the array)."""
    if not check_bounds and (i + 1) * n > array.shape[0]:
        raise IndexError(f"unchecked tile {i} of {n} elements runs past an array of {array.shape[0]}")


class PaddingMode:
    """What a load reads outside the array; UNDETERMINED reads a poison (a kernel must not use it)."""

    UNDETERMINED = "undetermined"
    ZERO = "zero"
    NEG_ZERO = "neg_zero"
    NAN = "nan"
    POS_INF = "pos_inf"
    NEG_INF = "neg_inf"


_PAD = {"zero": 0.0, "neg_zero": -0.0, "nan": np.nan, "pos_inf": np.inf, "neg_inf": -np.inf}


def _pad_value(dtype: np.dtype, padding_mode: str) -> Any:
    if padding_mode in _PAD:
        return _PAD[padding_mode]
    return np.nan if dtype.kind == "f" or is_bfloat16(dtype) else 0


def load(
    array: np.ndarray,
    index: Sequence[int],
    shape: Sequence[int],
    check_bounds: bool = True,
    padding_mode: str = PaddingMode.UNDETERMINED,
    **_: Any,
) -> np.ndarray:
    """The ``index``-th tile of ``shape`` (any rank), padded past the end as ``padding_mode`` says.

    1-D loads keep the emulator's first rule (zeros past the end, what the
    pointwise kernels' dropped tails read); a tile of higher rank that asks
    for no padding reads a poison outside the array, as cuTile's is undetermined.
    """
    index, shape = tuple(int(i) for i in index), tile_shape(shape)
    if len(index) != array.ndim or len(shape) != array.ndim:
        raise ValueError(f"tile index {index} / shape {shape} do not match an array of rank {array.ndim}")
    if len(shape) == 1:
        _inside(array, index[0], shape[0], check_bounds)
    elif not check_bounds and any((i + 1) * n > d for i, n, d in zip(index, shape, array.shape)):
        raise IndexError(f"unchecked tile {index} of {shape} runs past an array of {array.shape}")
    mode = padding_mode if len(shape) > 1 or padding_mode != PaddingMode.UNDETERMINED else PaddingMode.ZERO
    out = np.full(shape, _pad_value(array.dtype, mode), dtype=array.dtype)
    part = array[tuple(slice(i * n, (i + 1) * n) for i, n in zip(index, shape))]
    out[tuple(slice(0, d) for d in part.shape)] = part
    return out


class Slice:
    """A dense dimension of ``load_advanced_indexing``: elements start .. start + length - 1 (length a power of two)."""

    def __init__(self, start: int, length: int) -> None:
        self.start = int(start)
        self.length = tile_shape((length,))[0]


def load_advanced_indexing(
    array: np.ndarray, indices: Sequence[Any], padding_mode: str = PaddingMode.UNDETERMINED, **_: Any
) -> np.ndarray:
    """One 1-D integer tile (the sparse dim: an element index per slice) and a ``Slice`` for every other dim;
    the tile of their lengths, padded outside the array as ``padding_mode`` says. A tile wholly outside the
    array is refused: cuTile leaves its result undefined."""
    if len(indices) != array.ndim:
        raise ValueError(f"{len(indices)} indices for an array of rank {array.ndim}")
    sparse = [d for d, part in enumerate(indices) if not isinstance(part, Slice)]
    if len(sparse) != 1 or np.asarray(indices[sparse[0]]).ndim != 1:
        raise ValueError("load_advanced_indexing takes exactly one 1-D index tile, every other index a Slice")
    axes = [
        np.asarray(part, np.int64) if d in sparse else part.start + np.arange(part.length)
        for d, part in enumerate(indices)
    ]
    grids = np.ix_(*axes)
    inside = np.ones([len(a) for a in axes], bool)
    for grid, size in zip(grids, array.shape):
        inside &= (grid >= 0) & (grid < size)
    if not inside.any():
        raise IndexError(f"advanced-indexing tile lies entirely outside an array of {array.shape}")
    out = np.full(inside.shape, _pad_value(array.dtype, padding_mode), dtype=array.dtype)
    index = tuple(np.broadcast_to(grid, inside.shape)[inside] for grid in grids)
    out[inside] = array[index]
    return out


def _indices(array: np.ndarray, indices: Any, mask: Any) -> tuple[tuple[np.ndarray, ...], np.ndarray]:
    """cuTile's gather / scatter indices: one integer tile (or scalar) per array dim, broadcast to one shape
    (a 1-D array takes a bare tile); returns them and where they fall inside the array and the mask."""
    parts = indices if isinstance(indices, tuple) else (indices,)
    if len(parts) != array.ndim:
        raise ValueError(f"{len(parts)} index tiles for an array of rank {array.ndim}")
    parts = np.broadcast_arrays(*(np.asarray(p) for p in parts))
    inside = np.ones(parts[0].shape, bool)
    for p, d in zip(parts, array.shape):
        inside &= (p >= 0) & (p < d)
    if mask is not None:
        inside &= np.broadcast_to(np.asarray(mask, bool), inside.shape)
    return tuple(parts), inside


def gather(array: np.ndarray, indices: Any, mask: Any = None, padding_value: Any = 0, **_: Any) -> np.ndarray:
    """Elements at ``indices`` (a tile for a 1-D array, else a tuple of tiles, one per dim, broadcast together);
    outside the array or where ``mask`` is false, ``padding_value``."""
    parts, inside = _indices(array, indices, mask)
    out = np.full(inside.shape, padding_value, dtype=array.dtype)
    out[inside] = array[tuple(p[inside] for p in parts)]
    return out


def _check_implicit_cast(value: Any, array: np.ndarray) -> None:
    """cuTile refuses to store a float32 (or float64) tile into a 16- or 8-bit float array without an ``astype``.

    Only that narrowing is checked: the emulator's own intermediates are sometimes float64 where cuTile's are
    float32, so float64 into float32 would be a false alarm here."""
    if not isinstance(value, np.ndarray) or value.ndim == 0:
        return
    narrow = is_bfloat16(array.dtype) or (array.dtype.kind == "f" and array.dtype.itemsize <= 2)
    narrow = narrow or (array.dtype.itemsize == 1 and array.dtype.kind == "V")  # the fp8 dtypes
    if narrow and value.dtype.kind == "f" and value.dtype.itemsize >= 4:
        raise TypeError(
            f"Stored value is incompatible with array's dtype: cannot implicitly cast {value.dtype} to {array.dtype}"
        )


def scatter(array: np.ndarray, indices: Any, value: Any, mask: Any = None, **_: Any) -> None:
    """Store ``value`` at ``indices`` (as ``gather`` takes them) where inside the array and ``mask`` holds."""
    _check_implicit_cast(value, array)
    parts, inside = _indices(array, indices, mask)
    value = np.broadcast_to(np.asarray(value), inside.shape)
    array[tuple(p[inside] for p in parts)] = to_dtype(value[inside], array.dtype)


def store(array: np.ndarray, index: Sequence[int], tile: Any, check_bounds: bool = True, **_: Any) -> None:
    """Store ``tile`` at tile ``index`` (any rank; a scalar broadcasts to a tile of one), dropping what falls outside."""
    _check_implicit_cast(tile, array)
    tile = np.asarray(tile)
    if tile.ndim == 0:
        tile = tile.reshape((1,) * array.ndim)
    index = tuple(int(i) for i in index)
    if len(index) != array.ndim or tile.ndim != array.ndim:
        raise ValueError(f"tile index {index} / shape {tile.shape} do not match an array of rank {array.ndim}")
    if tile.ndim == 1:
        _inside(array, index[0], tile.shape[0], check_bounds)
    elif not check_bounds and any((i + 1) * n > d for i, n, d in zip(index, tile.shape, array.shape)):
        raise IndexError(f"unchecked tile {index} of {tile.shape} runs past an array of {array.shape}")
    part = array[tuple(slice(i * n, (i + 1) * n) for i, n in zip(index, tile.shape))]
    part[...] = to_dtype(tile[tuple(slice(0, d) for d in part.shape)], array.dtype)
