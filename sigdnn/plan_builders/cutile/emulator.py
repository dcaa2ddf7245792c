"""A NumPy stand-in for the part of cuda.tile that the generated kernels use.

GPU time is scarce and CI has no GPU, so the generated kernel modules are
also executed here, block by block, with NumPy arrays for tiles: the same
source text, with ``ct`` bound to this module instead of cuda.tile. That
tests what the code generator decides (layouts, offsets, broadcasting,
tails, dtype conversions, the float32 formulas) on the CPU. What it cannot
test is cuTile itself: its compiler, the GPU's transcendental functions
(NumPy's float32 ones round differently, by an ulp or so) and FMA
contraction (emulated only where the source asks for it through ``fma``).

Semantics follow cuTile's: loads and gathers read 0 outside the array,
stores drop what falls outside, float-to-integer conversion truncates and
saturates (NaN gives 0), ``%`` and ``//`` are Python's. As cuTile's launch
does, a Python float argument that is not a ``ct.Constant`` arrives as a
float32 and a Python int as an int32 (one past int32's range is an
OverflowError); and a store or scatter refuses a float32 tile for a 16- or
8-bit float array (the kernel must ``astype``, as cuTile requires). Where
cuTile leaves a case undefined or undocumented the emulator raises rather
than pick a behaviour: an advanced-indexing tile wholly outside its array,
and on ``store_advanced_indexing`` a sparse index outside the array or one
repeated.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from sigdnn.plan_builders.cutile.emulator_math import (  # noqa: F401 (ct.exp ... for the kernels)
    RoundingMode,
    abs,
    ceil,
    cos,
    exact_fma,
    exp,
    exp2,
    floor,
    isnan,
    log,
    maximum,
    minimum,
    mod,
    pow,
    quiet,
    rsqrt,
    sin,
    sqrt,
    tan,
    tanh,
    truediv,
    where,
)

float16, float32, float64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
int8, int16, int32, int64 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64)
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")  # ct.bfloat16 ...: ml_dtypes' types, imported on use
FP8_MAX = {"float8_e4m3fn": 448.0, "float8_e5m2": 57344.0}  # the largest finite values, where conversions saturate


def __getattr__(name: str) -> np.dtype:
    """ml_dtypes' types on first use: the registry imports this module, and ml_dtypes costs 0.3-1.5 s."""
    if name in _ML_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _is_bfloat16(dtype: np.dtype) -> bool:
    return dtype.type.__module__.startswith("ml_dtypes") and dtype.name == "bfloat16"


uint8, uint32, bool_ = np.dtype(np.uint8), np.dtype(np.uint32), np.dtype(np.bool_)
tfloat32 = "tfloat32"  # float32 storage rounded to TF32's 10-bit mantissa (``astype``)


_BID: contextvars.ContextVar[tuple[int, int, int]] = contextvars.ContextVar("bid", default=(0, 0, 0))
_GRID: contextvars.ContextVar[tuple[int, int, int]] = contextvars.ContextVar("grid", default=(1, 1, 1))
_REVERSED: contextvars.ContextVar[bool] = contextvars.ContextVar("reversed_blocks", default=False)


class _ConstantAnnotation:
    """What ``ct.Constant[T]`` evaluates to: marks a compile-time parameter, passed to the kernel as is."""

    def __init__(self, item: Any) -> None:
        self.item = item


class _Constant:
    """``ct.Constant[int]`` in annotations."""

    def __class_getitem__(cls, item: Any) -> Any:
        return _ConstantAnnotation(item)


Constant = _Constant


class Kernel:
    """What ``@ct.kernel`` makes: the Python function, run once per block by ``launch``."""

    def __init__(self, fn: Callable[..., None]) -> None:
        self.fn = fn
        names = fn.__code__.co_varnames[: fn.__code__.co_argcount]
        notes = getattr(fn, "__annotations__", {})
        self.constant = tuple(_is_constant(notes.get(name)) for name in names)


def _is_constant(annotation: Any) -> bool:
    if isinstance(annotation, str):  # a module with postponed annotations
        return "Constant" in annotation
    return annotation is _Constant or isinstance(annotation, _ConstantAnnotation)


_INT32 = np.iinfo(np.int32)


def _as_launched(value: Any, constant: bool) -> Any:
    """A launch argument as the kernel sees it: Python floats as float32, ints as int32 (not constants)."""
    if constant or isinstance(value, bool | np.ndarray):
        return value
    if isinstance(value, float):  # np.float64 too: it is a float
        return np.float32(value)
    if isinstance(value, int):
        if not _INT32.min <= value <= _INT32.max:
            raise OverflowError("Python int too large to convert to C int32_t")
        return np.int32(value)
    return value


def kernel(fn: Callable[..., None] | None = None, **hints: Any) -> Any:
    """``@ct.kernel`` or ``@ct.kernel(num_ctas=..., occupancy=...)``: hints change nothing here."""
    return Kernel(fn) if fn is not None else Kernel


def function(fn: Callable[..., Any]) -> Callable[..., Any]:
    return fn


def launch(stream: Any, grid: Sequence[int], k: Kernel, args: Sequence[Any]) -> None:
    """Run every block of ``grid`` in order (blocks are independent, so any order is a valid schedule)."""
    gx, gy, gz = (*grid, 1, 1)[:3]
    missing = [i for i, a in enumerate(args) if a is None]
    if missing:  # cuTile takes arrays and numbers; a None it refuses, even where the kernel never reads it
        raise TypeError(f"launch arguments {missing} are None")
    if len(args) == len(k.constant):
        args = [_as_launched(a, c) for a, c in zip(args, k.constant, strict=True)]
    grid_token = _GRID.set((gx, gy, gz))
    try:
        _run_blocks(k, args, gx, gy, gz)
    finally:
        _GRID.reset(grid_token)


@contextlib.contextmanager
def reversed_blocks() -> Iterator[None]:
    """Every launch inside runs its blocks last to first. Blocks are independent, so both orders are valid
    schedules; a kernel whose blocks write each other's elements (a race on a GPU) differs between them."""
    token = _REVERSED.set(True)
    try:
        yield
    finally:
        _REVERSED.reset(token)


def _run_blocks(k: Kernel, args: Sequence[Any], gx: int, gy: int, gz: int) -> None:
    order = reversed if _REVERSED.get() else iter
    for z in order(range(gz)):
        for y in order(range(gy)):
            for x in order(range(gx)):
                token = _BID.set((x, y, z))
                try:
                    k.fn(*args)
                finally:
                    _BID.reset(token)


def bid(axis: int) -> int:
    return _BID.get()[axis]


def static_iter(it: Any) -> Any:
    return it


def _to_dtype(x: Any, dtype: np.dtype) -> np.ndarray:
    x = np.asarray(x)
    dtype = np.dtype(dtype)
    with quiet():
        if dtype.kind in "iu" and x.dtype.kind == "f":
            # cvt saturates to a 32- or 64-bit integer (NaN -> 0); a narrower type keeps the low bits
            wide = np.dtype(dtype if dtype.itemsize >= 4 else np.int32)
            info = np.iinfo(wide)
            x = np.trunc(x.astype(np.float64))
            x = np.where(np.isnan(x), 0, np.clip(x, info.min, info.max))
            if float(info.max) + 1 == float(info.max):  # 64-bit: the max rounds up to 2^63 as a float
                return np.where(x >= float(info.max), info.max, x.astype(wide)).astype(dtype)
            return x.astype(wide).astype(dtype)
        if dtype.kind == "b":
            return x != 0
        if dtype.name in ("float8_e4m3fn", "float8_e5m2"):  # fp8 conversions saturate (satfinite): inf too
            top = FP8_MAX[dtype.name]
            return np.clip(x.astype(np.float32), -top, top).astype(dtype)
        if _is_bfloat16(dtype):
            return x.astype(np.float32).astype(dtype)
        return x.astype(dtype)


def _tf32(x: np.ndarray) -> np.ndarray:
    """float32 rounded to nearest (ties away) at 10 mantissa bits, as the tensor cores read TF32."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    finite = (bits & 0x7F800000) != 0x7F800000
    rounded = np.where(finite, (bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000), bits)
    return rounded.astype(np.uint32).view(np.float32)


def astype(x: Any, dtype: Any) -> np.ndarray:
    if isinstance(dtype, str) and dtype == tfloat32:
        return _tf32(x)
    return _to_dtype(x, dtype)


def bitcast(x: Any, dtype: np.dtype) -> np.ndarray:
    return np.asarray(x).view(dtype)


def _tile_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """A tile's extents, each a power of two as cuTile assumes of every tile shape (its compiler refuses others)."""
    extents = tuple(int(n) for n in shape)
    if any(n < 1 or n & (n - 1) for n in extents):
        raise ValueError(f"tile shape {extents}: every extent must be a power of two")
    return extents


def arange(n: int, dtype: np.dtype = int32) -> np.ndarray:
    return np.arange(_tile_shape((n,))[0], dtype=dtype)


def full(shape: Sequence[int], value: Any, dtype: np.dtype) -> np.ndarray:
    return np.full(_tile_shape(shape), value, dtype=dtype)


def broadcast_to(x: Any, shape: Sequence[int]) -> np.ndarray:
    return np.broadcast_to(np.asarray(x), tuple(shape))


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
    return np.nan if dtype.kind == "f" or _is_bfloat16(dtype) else 0


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
    index, shape = tuple(int(i) for i in index), _tile_shape(shape)
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
    narrow = _is_bfloat16(array.dtype) or (array.dtype.kind == "f" and array.dtype.itemsize <= 2)
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
    array[tuple(p[inside] for p in parts)] = _to_dtype(value[inside], array.dtype)


class Slice:
    """``ct.Slice(start, length)``: a dense dim of ``load_advanced_indexing`` / ``store_advanced_indexing``, the
    elements start ... start + length - 1 (``start`` a runtime int, ``length`` a power of two)."""

    def __init__(self, start: Any, length: int) -> None:
        self.start = int(start)
        self.length = length


def _advanced_indices(array: np.ndarray, indices: Any) -> tuple[int, list[np.ndarray], list[np.ndarray]]:
    """(the sparse dim, each dim's element indices, where each lies inside the array) of an advanced index: one 1-D
    integer tile (the sparse dim) and a ``Slice`` for every other dim, each extent a power of two, as cuTile
    requires. A tile with no element inside the array is undefined behaviour in cuTile: refused here."""
    if array.ndim < 2:
        raise ValueError("advanced indexing takes an array of rank 2 or more (a 1-D array: ct.gather / ct.scatter)")
    if not isinstance(indices, tuple) or len(indices) != array.ndim:
        raise ValueError(f"advanced indexing takes {array.ndim} indices (the array's rank), got {indices!r}")
    sparse = [d for d, item in enumerate(indices) if not isinstance(item, Slice)]
    if len(sparse) != 1:
        raise ValueError(f"advanced indexing takes exactly one 1-D integer tile (the sparse dim), got {len(sparse)}")
    tile = np.asarray(indices[sparse[0]])
    if tile.ndim != 1 or tile.dtype.kind not in "iu":
        raise ValueError(f"the sparse index must be a 1-D integer tile, got shape {tile.shape} of {tile.dtype}")
    picked = [tile.astype(np.int64) if d == sparse[0] else item.start + np.arange(item.length)
              for d, item in enumerate(indices)]  # fmt: skip
    _tile_shape([len(p) for p in picked])
    inside = [(p >= 0) & (p < n) for p, n in zip(picked, array.shape, strict=True)]
    if not all(i.any() for i in inside):
        raise IndexError(f"an advanced-index tile wholly outside an array of {array.shape} (undefined in cuTile)")
    return sparse[0], picked, inside


def load_advanced_indexing(array: np.ndarray, indices: Any, padding_mode: str = PaddingMode.UNDETERMINED,
                           **_: Any) -> np.ndarray:  # fmt: skip
    """The tile of rows picked by the sparse dim's index tile, each cut by the other dims' Slices: element
    (i, j, ...) is array[idx_0[i], idx_1[j], ...]. An element outside the array (on the sparse dim or a dense
    one, a negative index included) reads ``padding_mode``'s value (a poison where it is UNDETERMINED)."""
    _, picked, inside = _advanced_indices(array, indices)
    out = np.full([len(p) for p in picked], _pad_value(array.dtype, padding_mode), dtype=array.dtype)
    out[np.ix_(*inside)] = array[np.ix_(*(p[i] for p, i in zip(picked, inside)))]
    return out


def store_advanced_indexing(array: np.ndarray, indices: Any, tile: Any, **_: Any) -> None:
    """Store ``tile`` (exactly the indices' shape) at the elements ``load_advanced_indexing`` would read. Elements
    past a dense dim's extent are dropped, as in cuTile's tests. cuTile documents no behaviour for a sparse index
    outside the array, and a sparse index repeated is undefined: both are refused here, so no kernel relies on
    them."""
    _check_implicit_cast(tile, array)
    sparse, picked, inside = _advanced_indices(array, indices)
    tile = np.asarray(tile)
    if tile.shape != tuple(len(p) for p in picked):
        raise ValueError(f"a tile of {tile.shape} does not match the indices' shape {tuple(len(p) for p in picked)}")
    rows = picked[sparse]
    if not inside[sparse].all():
        raise IndexError(f"sparse indices {rows[~inside[sparse]].tolist()} outside {array.shape[sparse]}: a store "
                         "there is not documented")  # fmt: skip
    if np.unique(rows).size != rows.size:
        raise IndexError(f"sparse indices repeated on a store (undefined in cuTile): {rows.tolist()}")
    array[np.ix_(*(p[i] for p, i in zip(picked, inside)))] = _to_dtype(tile[np.ix_(*inside)], array.dtype)


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
    part[...] = _to_dtype(tile[tuple(slice(0, d) for d in part.shape)], array.dtype)


def num_blocks(axis: int) -> int:
    return _GRID.get()[axis]


def cdiv(x: int, y: int) -> int:
    return -(-x // y)


def extract(x: Any, index: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """Subtile ``index`` of ``x`` cut into a grid of ``shape`` subtiles (a block index, as ``load``'s)."""
    x = np.asarray(x)
    grid = [d // s if d % s == 0 else 0 for d, s in zip(x.shape, shape)] if len(shape) == x.ndim else []
    if len(index) != x.ndim or len(grid) != x.ndim or any(not 0 <= i < g for i, g in zip(index, grid)):
        raise ValueError(f"extract: no subtile {tuple(index)} of {tuple(shape)} in a {x.shape} tile")
    return x[tuple(slice(i * s, (i + 1) * s) for i, s in zip(index, shape, strict=True))].copy()


def cat(tiles: Sequence[Any], axis: int) -> np.ndarray:
    """Two tiles of one shape joined along ``axis`` (cuTile takes a pair of equal shapes: tile extents are powers
    of two)."""
    arrays = [np.asarray(t) for t in tiles]
    if len(arrays) != 2 or arrays[0].shape != arrays[1].shape or arrays[0].dtype != arrays[1].dtype:
        raise ValueError(f"cat: a pair of one shape and dtype, got {[(a.shape, str(a.dtype)) for a in arrays]}")
    return np.concatenate(arrays, axis=axis)


def reshape(x: Any, shape: Sequence[int]) -> np.ndarray:
    return np.reshape(np.asarray(x), tuple(shape))


def _reduce(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def apply(x: Any, axis: Any = None, *, keepdims: bool = False, **kw: Any) -> np.ndarray:
        x = np.asarray(x)
        axis = tuple(axis) if isinstance(axis, list) else axis
        with quiet():
            return np.asarray(fn(x, axis, keepdims, **kw)).astype(x.dtype)

    return apply


sum = _reduce(lambda x, axis, keepdims, **_: np.sum(x, axis=axis, keepdims=keepdims))
prod = _reduce(lambda x, axis, keepdims, **_: np.prod(x, axis=axis, keepdims=keepdims))
max = _reduce(
    lambda x, axis, keepdims, propagate_nan=False, **_: (np.max if propagate_nan else np.fmax.reduce)(
        x, axis=axis, keepdims=keepdims
    )
)
min = _reduce(
    lambda x, axis, keepdims, propagate_nan=False, **_: (np.min if propagate_nan else np.fmin.reduce)(
        x, axis=axis, keepdims=keepdims
    )
)


def reduce(x: Any, axis: int, func: Callable[..., Any], identity: Any, *, keepdims: bool = False) -> Any:
    """cuTile's custom reduction of a tile or a tuple of tiles: ``func`` combines two groups, pairwise along ``axis``."""
    single = not isinstance(x, tuple)
    tiles = [np.asarray(t) for t in ((x,) if single else x)]
    shape = np.broadcast_shapes(*(t.shape for t in tiles))
    parts = [np.broadcast_to(t, shape) for t in tiles]
    ids = (identity,) if single else tuple(identity)
    with quiet():
        while parts[0].shape[axis] > 1:
            n = parts[0].shape[axis]
            if n % 2:  # pad with the identity to an even length
                pad = [np.full((*shape[:axis], 1, *shape[axis + 1 :]), v, dtype=p.dtype) for p, v in zip(parts, ids)]
                parts = [np.concatenate([p, q], axis=axis) for p, q in zip(parts, pad, strict=True)]
                n += 1
            half = [np.take(p, range(n // 2), axis=axis) for p in parts]
            rest = [np.take(p, range(n // 2, n), axis=axis) for p in parts]
            out = func(*half, *rest)
            parts = [np.asarray(o).astype(p.dtype) for o, p in zip((out,) if single else out, parts, strict=True)]
            shape = parts[0].shape
    if not keepdims:
        parts = [np.squeeze(p, axis=axis) for p in parts]
    return parts[0] if single else tuple(parts)


def cumsum(x: Any, axis: int = 0, *, reverse: bool = False, **_: Any) -> np.ndarray:
    """cuTile's scan: the running sums of the tile along ``axis`` (from the last element with ``reverse``), in its
    dtype."""
    x = np.asarray(x)
    with quiet():
        if reverse:
            return np.flip(np.cumsum(np.flip(x, axis), axis=axis, dtype=x.dtype), axis).copy()
        return np.cumsum(x, axis=axis, dtype=x.dtype)


def transpose(x: Any) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(x).T)


def mma(a: Any, b: Any, acc: Any) -> np.ndarray:
    """a @ b + acc with the products and the sum exact, rounded once to acc's dtype (float32)."""
    a, b, acc = np.asarray(a), np.asarray(b), np.asarray(acc)
    if a.dtype != b.dtype or a.dtype.kind in "iub":
        raise TypeError(f"mma operands {a.dtype} x {b.dtype}: expected one float dtype")
    exact = np.matmul(a.astype(np.float64), b.astype(np.float64)) + acc.astype(np.float64)
    return exact.astype(acc.dtype)
