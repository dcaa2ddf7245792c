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
8-bit float array (the kernel must ``astype``, as cuTile requires).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from sigdnn.plan_builders.cutile.emulator_dtypes import FP8_MAX, tf32, to_dtype  # noqa: F401 (ct.FP8_MAX)
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
from sigdnn.plan_builders.cutile.emulator_memory import (  # noqa: F401 (ct.load ... for the kernels)
    PaddingMode,
    Slice,
    TileArray,
    gather,
    load,
    load_advanced_indexing,
    scatter,
    store,
    tile_shape,
)

float16, float32, float64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)
int8, int16, int32, int64 = np.dtype(np.int8), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.int64)
_ML_DTYPES = ("bfloat16", "float8_e4m3fn", "float8_e5m2")  # ct.bfloat16 ...: ml_dtypes' types, imported on use


def __getattr__(name: str) -> np.dtype:
    """ml_dtypes' types on first use: the registry imports this module, and ml_dtypes costs 0.3-1.5 s."""
    if name in _ML_DTYPES:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    """A launch argument as the kernel sees it: arrays as TileArray views, Python floats as float32, ints as int32
    (not constants)."""
    if isinstance(value, np.ndarray) and not constant:
        return value.view(TileArray)
    if constant or isinstance(value, bool):
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


def astype(x: Any, dtype: Any) -> np.ndarray:
    if isinstance(dtype, str) and dtype == tfloat32:
        return tf32(x)
    return to_dtype(x, dtype)


def bitcast(x: Any, dtype: np.dtype) -> np.ndarray:
    return np.asarray(x).view(dtype)


def arange(n: int, dtype: np.dtype = int32) -> np.ndarray:
    return np.arange(tile_shape((n,))[0], dtype=dtype)


def full(shape: Sequence[int], value: Any, dtype: np.dtype) -> np.ndarray:
    return np.full(tile_shape(shape), value, dtype=dtype)


def broadcast_to(x: Any, shape: Sequence[int]) -> np.ndarray:
    return np.broadcast_to(np.asarray(x), tuple(shape))


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
