"""Reading a node's tensors into float64 (int64) device arrays and writing results back, rounded once.

A read gathers each logical element from the caller's buffer by its storage
offset (any strides, any dtype) and widens it exactly; a write rounds each
value once to the output's dtype (round-to-odd through float32 for bfloat16
and fp8, as ``sigdnn.dtypes.round_to``) and scatters it to its offset. Both
run on the device; the index maps are the only host-made data.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from sigdnn.dtypes import DataType, as_data_type
from sigdnn.graph.layout import packed_strides
from sigdnn.plan_builders.gpu_reference.arrays import (
    Array,
    IndexMap,
    Permuted,
    gather,
    map_arguments,
    outer_offsets,
    where,
)
from sigdnn.plan_builders.gpu_reference.backend import TILE, Gpu, kernel_dtype

DECODES = {"float8_e4m3fn": "DECODE_E4M3", "float8_e5m2": "DECODE_E5M2", "bool": "DECODE_BOOL"}
PLAIN_CASTS = (DataType.FLOAT64, DataType.FLOAT32, DataType.FLOAT16)  # float64 rounds to these by one cast
FLOAT_ENCODES = {
    DataType.FLOAT64: "ENCODE_CAST",
    DataType.FLOAT32: "ENCODE_CAST",
    DataType.FLOAT16: "ENCODE_CAST",
    DataType.BFLOAT16: "ENCODE_BF16",
    DataType.FP8_E4M3: "ENCODE_E4M3",
    DataType.FP8_E5M2: "ENCODE_E5M2",
    DataType.BOOL: "ENCODE_BOOL",
}


def element_strides(buffer: Any) -> tuple[int, ...]:
    """A buffer's strides in elements (NumPy's are in bytes, DeviceArray's in elements)."""
    if isinstance(buffer, np.ndarray):
        return tuple(s // buffer.itemsize for s in buffer.strides)
    return tuple(buffer.strides)


def storage_map(dims: tuple[int, ...], strides: tuple[int, ...]) -> IndexMap:
    """The storage offsets of a buffer's logical elements: their count where they are 0 .. n - 1 (packed
    row-major), else an outer sum (gather and scatter compute them on the device either way)."""
    if all(d == 1 or s == p for d, s, p in zip(dims, strides, packed_strides(dims), strict=True)):
        return math.prod(dims)
    return outer_offsets(dims, strides)


def read(gpu: Gpu, buffer: Any, wide: Any, order: tuple[int, ...] | None = None) -> Array:
    """The buffer's logical elements as a packed ``wide`` (float64 or int64) array, each exact; with ``order``,
    packed with its axis j the logical axis order[j] (a conv reads NHWC tensors as (N, H, W, C): a plain copy
    of such a buffer, not a transpose)."""
    dims, strides = tuple(buffer.shape), element_strides(buffer)
    order = tuple(range(len(dims))) if order is None else order
    shape, steps = tuple(dims[a] for a in order), tuple(strides[a] for a in order)
    out = Array.empty(gpu, shape, wide)
    decode = DECODES.get(np.dtype(buffer.dtype).name, "DECODE_CAST")
    gather(gpu, gpu.raw(buffer, dims, strides), storage_map(shape, steps), out.data, 0.0, decode)
    return out


def encoding(value_dtype: np.dtype, target: DataType) -> str:
    """How a working value (float64 or int64) is rounded into ``target``."""
    if value_dtype.kind == "i":
        if target is DataType.INT64:
            return "ENCODE_RAW"
        if target.is_integer:
            return "ENCODE_INT_WRAP"
        return "ENCODE_BOOL"  # (write() turns integer values bound for floats into float64 first)
    return FLOAT_ENCODES.get(target, "ENCODE_INT")


def write(gpu: Gpu, value: Array | Permuted, buffer: Any, target: DataType) -> None:
    """Round ``value`` once to ``target`` and store it into the buffer's logical elements.

    A ``Permuted`` value is stored through the buffer's axes in its order (no transpose is made); an axis it
    names more than once is split, its first occurrence outermost (a grouped conv's (G, N, P, Kg) for y's K =
    (G, Kg)). A buffer of
    another dtype than ``target`` (validation's float64 runs of a narrow node) gets what the CPU reference's
    store gives it: a float64 buffer the unrounded float64 value where ``target`` is float64, float32 or
    float16 (a plain cast there), else the value rounded to ``target``, in the buffer's dtype."""
    dims, strides = tuple(buffer.shape), element_strides(buffer)
    if not isinstance(value, Permuted):
        value = Permuted(value, tuple(range(len(dims))))
    order_dims, order_strides = permuted_view(value, dims, strides)
    value = value.array.broadcast_to(order_dims)
    into_float64 = np.dtype(buffer.dtype) == np.float64 and target in PLAIN_CASTS and value.dtype == np.float64
    if np.dtype(buffer.dtype) != target.numpy and not into_float64:
        rounded = gpu.empty(value.size, kernel_dtype(target.numpy))
        scatter(gpu, value, rounded, value.size, target)
        value = Array.empty(gpu, order_dims, np.float64)
        gather(gpu, rounded, value.size, value.data, 0.0, DECODES.get(target.numpy.name, "DECODE_CAST"))
    if np.dtype(buffer.dtype) != target.numpy:
        target = as_data_type(np.dtype(buffer.dtype))
    scatter(gpu, value, gpu.raw(buffer, dims, strides), storage_map(order_dims, order_strides), target)


def permuted_view(
    value: Permuted, dims: tuple[int, ...], strides: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The buffer's (dims, strides) in ``value``'s axis order: a split axis takes its parts' sizes from the array,
    each part's stride the axis' times the sizes of its later parts."""
    axes, shape = value.axes, value.array.shape
    split = {a for a in axes if axes.count(a) > 1}
    order_dims = tuple(shape[j] if a in split else dims[a] for j, a in enumerate(axes))
    for a in split:
        parts = math.prod(d for d, b in zip(order_dims, axes, strict=True) if b == a)
        if parts != dims[a]:
            raise ValueError(f"axis {a} of {dims} split into parts of {parts} elements")
    order_strides = tuple(
        strides[a] * math.prod(order_dims[i] for i in range(j + 1, len(axes)) if axes[i] == a)
        for j, a in enumerate(axes)
    )
    return order_dims, order_strides


def scatter(gpu: Gpu, value: Array, raw: Any, index: IndexMap, target: DataType) -> None:
    """raw[index(i)] = value[i] rounded once to ``target`` (``index`` as ``gather``'s)."""
    if value.dtype.kind == "i" and target.is_float:
        value = value.astype(np.float64)  # (integers past 2^53 round twice: docs/gpu_reference.md)
    code = encoding(value.dtype, target)
    if code == "ENCODE_INT":  # the device's float -> int8 / uint8 conversion wraps: clip finite values first
        lo, hi = (float(b) for b in (np.iinfo(target.numpy).min, np.iinfo(target.numpy).max))
        finite = value - value == 0
        value = where(finite & (value < lo), lo, where(finite & (value > hi), hi, value))
    rows, cols, c, dense = map_arguments(gpu, index)
    grid = (-(-value.size // TILE), 1, 1)
    gpu.launch("scatter", grid, value.data, rows, cols, c, raw, value.size, TILE, gpu.constant(code), dense)
