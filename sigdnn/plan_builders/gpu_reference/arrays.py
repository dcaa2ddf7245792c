"""Flat float64 (or int64) arrays on the device, with the NumPy-like operations the op formulas need.

Every operation is one launch of a tiles.py kernel: ``take`` (a gather by a
host-made index map: broadcasting, transposes, windows, padding), the
elementwise modes (operators and the functions below), ``matmul`` (batched
float64 GEMM) and reductions over the last axis. Arrays are always packed
row-major; a "bool" array holds 0.0 / 1.0 in the working dtype. Nothing here
is fast: each op is a full pass over float64 memory, which keeps every
formula a plain, checkable sequence of whole-array steps.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import attrs
import numpy as np

from sigdnn.graph.layout import packed_strides
from sigdnn.plan_builders.gpu_reference.backend import (
    GRID_LIMITS,
    INTEGER_GEMM_TILE,
    ORDERED_ROWS,
    OUTER_TILE,
    ROW_TILE,
    ROWS_TILE,
    TILE,
    Gpu,
)


def row_major_index(shape: tuple[int, ...]) -> np.ndarray:
    """Flat indices 0..n-1 laid out in ``shape`` (the index map of a packed array)."""
    return np.arange(math.prod(shape), dtype=np.int64).reshape(shape)


class Array:
    """A packed array of ``shape`` in ``dtype`` (float64 or int64) held in a flat device buffer."""

    def __init__(self, gpu: Gpu, data: Any, shape: Sequence[int], dtype: Any) -> None:
        self.gpu = gpu
        self.data = data
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)

    # -- construction ----------------------------------------------------------
    @classmethod
    def empty(cls, gpu: Gpu, shape: Sequence[int], dtype: Any = np.float64) -> Array:
        return cls(gpu, gpu.empty(math.prod(shape), dtype), shape, dtype)

    @classmethod
    def from_host(cls, gpu: Gpu, host: np.ndarray, dtype: Any = np.float64) -> Array:
        """An upload of a small host array (per-row constants, weights of a resample)."""
        host = np.asarray(host, dtype)
        return cls(gpu, gpu.upload(host), host.shape, dtype)

    @classmethod
    def full(cls, gpu: Gpu, shape: Sequence[int], value: float, dtype: Any = np.float64) -> Array:
        out = cls.empty(gpu, shape, dtype)
        out._elementwise_into("COPY", (value,))
        return out

    @classmethod
    def counting(cls, gpu: Gpu, shape: Sequence[int], dtype: Any = np.int64) -> Array:
        """0, 1, 2, ... in row-major order (each element's flat index)."""
        out = cls.empty(gpu, shape, dtype)
        out._elementwise_into("INDEX", ())
        return out

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def host(self) -> np.ndarray:
        """A host copy (tests and debugging; plans never need one)."""
        return self.gpu.download(self.data, self.size).reshape(self.shape)

    # -- data movement ---------------------------------------------------------
    def reshape(self, *shape: int) -> Array:
        shape = tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], tuple) else shape
        if -1 in shape:
            known = math.prod(d for d in shape if d != -1)
            shape = tuple(self.size // max(known, 1) if d == -1 else d for d in shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape {self.shape} to {shape}")
        return Array(self.gpu, self.data, shape, self.dtype)

    def take(self, index: np.ndarray, pad: float = 0.0) -> Array:
        """out[...] = flat self[index[...]], ``pad`` where index < 0: one gather, out takes index's shape."""
        index = np.asarray(index, np.int64)
        out = Array.empty(self.gpu, index.shape, self.dtype)
        gather(self.gpu, self.data, index, out.data, pad, "DECODE_RAW")
        return out

    def strided(self, shape: Sequence[int], strides: Sequence[int], offset: int = 0) -> Array:
        """The elements flat self[offset + sum of i_a * strides[a]] in ``shape`` (a transpose, broadcast or row
        of self): one gather by the outer sum of the leading and the trailing axes' offsets (``outer_offsets``),
        as a strided tensor is read."""
        out = Array.empty(self.gpu, tuple(int(d) for d in shape), self.dtype)
        gather(self.gpu, self.data, outer_offsets(shape, strides, offset), out.data, 0.0, "DECODE_RAW")
        return out

    def take_outer(self, rows: np.ndarray, cols: np.ndarray, pad: float = 0.0) -> Array:
        """out[i, j] = flat self[rows[i] + cols[j]], ``pad`` where cols[j] < 0: an index map that is an outer
        sum, uploaded as its two sides."""
        cols = np.asarray(cols, np.int64).reshape(-1)
        return self._gather_outer(rows, cols, 0, cols.size, cols.size, cols.size, pad)

    def take_windows(self, rows: np.ndarray, window: np.ndarray, image: int, n: int, pad: float = 0.0) -> Array:
        """out[i, (t, m, p)] = flat self[rows[i] + m * image + window[t, p]] over (taps, n, P), ``pad`` where
        window[t, p] < 0: an im2col matrix (rows: channel offsets; window: each tap's offset at each output
        position within an image; image: one image's stride), its columns' map formed on the device (at batch
        64 a ResNet stem's took the host a third of a second and 315 MB to send)."""
        taps, positions = window.shape
        return self._gather_outer(rows, window, image, n * positions, positions, taps * n * positions, pad)

    def take_window_rows(
        self, window: np.ndarray, channels: np.ndarray, image: int, n: int, groups: int, pad: float = 0.0
    ) -> Array:
        """out[g, m * P + p, t * Cg + c] = flat self[m * image + window[p, t] + channels[g * Cg + c]] over
        (groups, n * P, taps * Cg), ``pad`` where window[p, t] < 0: an im2col matrix with a row per output position
        (window: each tap's offset at each position within an image; channels: each channel's offset), so that
        a channels-last source is read and the matrix written in runs of channels (``tiles.gather_rows``)."""
        positions, taps = window.shape
        cg = channels.size // groups
        out = Array.empty(self.gpu, (groups, n * positions, taps, cg), self.dtype)
        tc = min(ROWS_TILE[1], 1 << (cg - 1).bit_length())
        tr = ROWS_TILE[0] // tc
        self.gpu.launch(
            "gather_rows",
            (math.ceil(n * positions / tr), taps * math.ceil(cg / tc), groups),
            self.data,
            self.gpu.upload_kept(np.asarray(window, np.int64)),
            self.gpu.upload_kept(np.asarray(channels, np.int64)),
            int(image),
            int(positions),
            int(taps),
            int(cg),
            self.gpu.shaped(out.data, out.shape),
            int(pad) if self.dtype.kind in "iu" else float(pad),  # a scalar of out's kind
            tr,
            tc,
        )
        return out.reshape(groups, n * positions, taps * cg)

    def _gather_outer(
        self, rows: np.ndarray, window: np.ndarray, image: int, per_tap: int, positions: int, columns: int, pad: float
    ) -> Array:
        """gather_outer's launch (tiles.py says what each argument means)."""
        out = Array.empty(self.gpu, (rows.size, columns), self.dtype)
        tr, tc = OUTER_TILE
        self.gpu.launch(
            "gather_outer",
            (math.ceil(columns / tc), math.ceil(rows.size / tr), 1),
            self.data,
            self.gpu.upload_kept(np.asarray(rows, np.int64)),
            self.gpu.upload_kept(np.asarray(window, np.int64)),
            int(image),
            int(per_tap),
            int(positions),
            self.gpu.shaped(out.data, out.shape),
            int(pad) if self.dtype.kind in "iu" else float(pad),  # a scalar of out's kind
            tr,
            tc,
        )
        return out

    @classmethod
    def stack(cls, parts: Sequence[Array]) -> Array:
        """Arrays of one shape stacked along a new first axis: one copy (a gather) into each part's place."""
        first = parts[0]
        out = cls.empty(first.gpu, (len(parts), *first.shape), first.dtype)
        for i, part in enumerate(parts):
            gather(
                first.gpu,
                part.data,
                first.size,
                first.gpu.part(out.data, i * first.size, first.size),
                0.0,
                "DECODE_RAW",
            )
        return out

    def row(self, i: int) -> Array:
        """self[i] along the first axis."""
        strides = packed_strides(self.shape)
        return self.strided(self.shape[1:], strides[1:], i * strides[0])

    def astype(self, dtype: Any) -> Array:
        """The values converted to ``dtype`` (int64 -> float64 rounds to nearest; float -> int64 truncates)."""
        out = Array.empty(self.gpu, self.shape, dtype)
        gather(self.gpu, self.data, self.size, out.data, 0.0, "DECODE_CAST")
        return out

    def transpose(self, *axes: int) -> Array:
        axes = tuple(axes[0]) if len(axes) == 1 and isinstance(axes[0], tuple) else axes
        strides = packed_strides(self.shape)
        return self.strided([self.shape[a] for a in axes], [strides[a] for a in axes])

    def broadcast_to(self, shape: Sequence[int]) -> Array:
        shape = tuple(shape)
        if shape == self.shape:
            return self
        try:
            fits = len(shape) >= len(self.shape) and np.broadcast_shapes(self.shape, shape) == shape
        except ValueError:
            fits = False
        if not fits:
            raise ValueError(f"cannot broadcast {self.shape} to {shape}")
        lead = len(shape) - len(self.shape)
        own = (0,) * lead + tuple(s if d > 1 else 0 for d, s in zip(self.shape, packed_strides(self.shape)))
        return self.strided(shape, own)

    # -- elementwise -----------------------------------------------------------
    def _elementwise_into(self, mode: str, operands: tuple[Any, ...]) -> None:
        """self = mode(operands): arrays of self's shape (broadcast first), one-element arrays (read as one value,
        not broadcast) or Python scalars."""
        arrays, scalars, reads = [], [], []
        for op in (*operands, None, None, None)[:3]:
            if op is None:  # no operand: an unread slot
                arrays.append(self.data)
                scalars.append(0)
                reads.append("OPERAND_SCALAR")
                continue
            # A Python number goes in as a device array: cuTile passes a scalar launch argument as a float32 /
            # int32, which would round a float64 constant (0.044715, 1 / sqrt(2)) or refuse a large int64.
            operand = op if isinstance(op, Array) else self._constant(op)
            one = operand.size == 1
            arrays.append(operand.data if one else operand.broadcast_to(self.shape).data)
            scalars.append(0)
            reads.append("OPERAND_ELEMENT" if one else "OPERAND_ARRAY")
        self.gpu.launch(
            "elementwise",
            (math.ceil(self.size / TILE), 1, 1),
            *arrays,
            *(self._scalar(s) for s in scalars),
            self.data,
            TILE,
            self.gpu.constant(mode),
            *(self.gpu.constant(read) for read in reads),
        )

    def _scalar(self, value: Any) -> Any:
        return int(value) if self.dtype.kind == "i" else float(value)

    def _constant(self, value: Any) -> Array:
        """``value`` in this array's dtype as a one-element device array of its rank (uploaded once per value)."""
        return self.gpu.constant_array(self._scalar(value), self.dtype, len(self.shape))

    def apply(self, mode: str, *others: Any, dtype: Any = None) -> Array:
        """mode(self, *others) elementwise, broadcast to a common shape (a new array, of ``dtype`` if given, else
        self's: the kernel casts its result to the output's dtype)."""
        shapes = [self.shape, *(o.shape for o in others if isinstance(o, Array))]
        out = Array.empty(self.gpu, np.broadcast_shapes(*shapes), self.dtype if dtype is None else dtype)
        out._elementwise_into(mode, (self, *others))
        return out

    def __add__(self, o: Any) -> Array:
        return self.apply("ADD", o)

    def __sub__(self, o: Any) -> Array:
        return self.apply("SUB", o)

    def __rsub__(self, o: Any) -> Array:
        return self.apply("NEG").apply("ADD", o)

    def __mul__(self, o: Any) -> Array:
        return self.apply("MUL", o)

    def __truediv__(self, o: Any) -> Array:
        return self.apply("DIV", o)

    def __rtruediv__(self, o: Any) -> Array:
        return Array.full(self.gpu, self.shape, o, self.dtype).apply("DIV", self)

    def __neg__(self) -> Array:
        return self.apply("NEG")

    def __eq__(self, o: Any) -> Array:  # type: ignore[override]
        return self.apply("EQ", o)

    def __ne__(self, o: Any) -> Array:  # type: ignore[override]
        return self.apply("NE", o)

    def __gt__(self, o: Any) -> Array:
        return self.apply("GT", o)

    def __ge__(self, o: Any) -> Array:
        return self.apply("GE", o)

    def __lt__(self, o: Any) -> Array:
        return self.apply("LT", o)

    def __le__(self, o: Any) -> Array:
        return self.apply("LE", o)

    def __and__(self, o: Any) -> Array:
        return self.apply("AND", o)

    def __or__(self, o: Any) -> Array:
        return self.apply("OR", o)

    __hash__ = None  # type: ignore[assignment]

    # -- reductions and products -------------------------------------------------
    def reduce_last(self, mode: str) -> Array:
        """SUM / MAX / MIN / PROD over the last axis (max / min give NaN for a row holding one): one block a
        row, launched in parts of at most grid x's bound of rows."""
        rows, n = self.size // max(self.shape[-1], 1), self.shape[-1]
        out = Array.empty(self.gpu, self.shape[:-1], self.dtype)
        identity = _identity(mode, self.dtype)
        for first in range(0, rows, GRID_LIMITS[0]):
            count = min(GRID_LIMITS[0], rows - first)
            self.gpu.launch(
                "reduce_rows",
                (count, 1, 1),
                self.gpu.shaped(self.gpu.part(self.data, first * n, count * n), (count, n)),
                self.gpu.part(out.data, first, count),
                n,
                identity,
                ROW_TILE,
                self.gpu.constant(f"R_{mode}"),
            )
        return out

    def sum_last_in_order(self) -> Array:
        """The sum over the last axis added left to right from 0.0: the order of a reference that accumulates
        tap by tap (pooling's backward), where ``reduce_last``'s tree order could leave another float64
        residue of a cancelling sum."""
        rows, n = self.size // max(self.shape[-1], 1), self.shape[-1]
        out = Array.empty(self.gpu, self.shape[:-1], self.dtype)
        self.gpu.launch(
            "sum_rows_in_order",
            (math.ceil(rows / ORDERED_ROWS), 1, 1),
            self.gpu.shaped(self.data, (rows, n)),
            self.gpu.shaped(out.data, (rows, 1)),
            n,
            ORDERED_ROWS,
        )
        return out

    def reduce(self, mode: str, axes: Sequence[int], keepdims: bool = True) -> Array:
        """A reduction over ``axes`` (moved last, then one row per kept element)."""
        axes = tuple(sorted(a % len(self.shape) for a in axes))
        kept = tuple(a for a in range(len(self.shape)) if a not in axes)
        moved = self.transpose(*kept, *axes) if axes != tuple(range(len(kept), len(self.shape))) else self
        rows = moved.reshape(*(self.shape[a] for a in kept), math.prod(self.shape[a] for a in axes))
        out = rows.reduce_last(mode)
        if keepdims:
            return out.reshape(tuple(1 if a in axes else d for a, d in enumerate(self.shape)))
        return out

    def matmul(self, other: Array) -> Array:
        """Batched self @ other: (B, M, K) x (B, K, N) -> (B, M, N); 2-D operands are one batch. float64 by exact
        FMAs (``Gpu.gemm``); int64 as every product summed with int64's wrapping."""
        a, b = (x.reshape(1, *x.shape) if len(x.shape) == 2 else x for x in (self, other))
        (batch, m, k), (batch_b, k_b, n) = a.shape, b.shape
        if batch != batch_b or k != k_b or a.dtype != b.dtype:
            raise ValueError(f"matmul of {a.dtype}{a.shape} and {b.dtype}{b.shape}")
        out = Array.empty(self.gpu, (batch, m, n), a.dtype)
        if a.dtype.kind == "i":
            operands = (self.gpu.shaped(x.data, x.shape) for x in (a, b, out))
            grid = (math.ceil(m / INTEGER_GEMM_TILE[0]), math.ceil(n / INTEGER_GEMM_TILE[1]), batch)
            self.gpu.launch("integer_gemm", grid, *operands, k, *INTEGER_GEMM_TILE)
        else:
            self.gpu.gemm(a.data, b.data, out.data, (batch, m, n, k))
        return out if len(self.shape) == 3 else out.reshape(m, n)


@attrs.frozen
class Permuted:
    """An array whose axis j is a tensor's logical axis ``axes[j]``: what a formula returns where its natural
    order is a transpose of the output's (a conv's (K, N, P) for y's (N, K, P)), so that the write goes
    through the output's strides in that order instead of a transpose making a copy."""

    array: Array
    axes: tuple[int, ...]


def _identity(mode: str, dtype: np.dtype) -> float | int:
    if dtype.kind == "i":
        info = np.iinfo(np.int64)
        return {"SUM": 0, "PROD": 1, "MAX": int(info.min), "MIN": int(info.max)}[mode]
    return {"SUM": 0.0, "PROD": 1.0, "MAX": -math.inf, "MIN": math.inf}[mode]


def offsets(dims: Sequence[int], strides: Sequence[int]) -> np.ndarray:
    """Each logical element's storage offset (int64, shaped ``dims``): sum of i_a * strides[a]."""
    total = np.zeros(tuple(dims), np.int64)
    for axis, (d, s) in enumerate(zip(dims, strides, strict=True)):
        total = total + (np.arange(d, dtype=np.int64) * int(s)).reshape(
            [d if a == axis else 1 for a in range(len(dims))]
        )
    return total


# Which element each of n a gather reads (a scatter writes): an int n is 0 .. n - 1, computed on the device; an
# array is an explicit map (-1: ``pad``); (rows, cols) is the row-major outer sum rows[i // C] + cols[i % C],
# C = cols.size: a strided tensor's storage offsets as two maps of about the square root of its size (the map of
# every element of a ResNet activation at batch 64 took the host about a second to make and 400 MB to send).
IndexMap = int | np.ndarray | tuple[np.ndarray, np.ndarray]


def map_size(index: IndexMap) -> int:
    """The number of elements a map addresses."""
    if isinstance(index, int):
        return index
    if isinstance(index, tuple):
        return index[0].size * index[1].size
    return index.size


def map_arguments(gpu: Gpu, index: IndexMap) -> tuple[Any, Any, int, int]:
    """A map as the kernels take it: (rows, cols, C, dense)."""
    if isinstance(index, int):
        return gpu.no_index, gpu.no_index, 1, 1
    rows, cols = index if isinstance(index, tuple) else (index, np.zeros(1, np.int64))
    return gpu.upload_kept(np.asarray(rows, np.int64)), gpu.upload_kept(np.asarray(cols, np.int64)), int(cols.size), 0


def outer_offsets(shape: Sequence[int], strides: Sequence[int], offset: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Storage offsets of the elements of ``shape`` (row-major) as an outer sum: the leading axes' offsets (plus
    ``offset``) and the trailing axes', split where the larger side is smallest (read-only arrays, made once per
    shape, strides and offset: validation reads the same tensors many times)."""
    return _outer_offsets(tuple(int(d) for d in shape), tuple(int(s) for s in strides), int(offset))


@functools.lru_cache(maxsize=4096)
def _outer_offsets(shape: tuple[int, ...], strides: tuple[int, ...], offset: int) -> tuple[np.ndarray, np.ndarray]:
    split = min(range(len(shape) + 1), key=lambda k: max(math.prod(shape[:k]), math.prod(shape[k:])))
    rows, cols = (offsets(shape[a:b], strides[a:b]).reshape(-1) for a, b in ((0, split), (split, len(shape))))
    rows = rows + offset
    for part in (rows, cols):
        part.setflags(write=False)
    return rows, cols


def gather(gpu: Gpu, src: Any, index: IndexMap, out: Any, pad: float, decode: str) -> None:
    """out[i] = decode(src[index(i)]), ``pad`` where the index is negative; the maps are uploaded once per call."""
    n = map_size(index)
    typed_pad = int(pad) if np.dtype(out.dtype).kind in "iu" else float(pad)  # a scalar of out's kind
    rows, cols, c, dense = map_arguments(gpu, index)
    gpu.launch(
        "gather", (math.ceil(n / TILE), 1, 1), src, rows, cols, c, out, typed_pad, TILE, gpu.constant(decode), dense
    )


def where(cond: Array, x: Any, y: Any) -> Array:
    """x where cond is nonzero, else y (broadcast to a common shape)."""
    return cond.apply("WHERE", x, y)


def maximum(x: Array, y: Any) -> Array:
    return x.apply("MAXIMUM", y)


def minimum(x: Array, y: Any) -> Array:
    return x.apply("MINIMUM", y)
