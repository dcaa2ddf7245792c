"""Host memory for the reference backend: NumPy arrays and one arena per run."""

from __future__ import annotations

from typing import Any

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import ExecutionError, VariantPackError
from sigdnn.executor.host_arrays import from_dlpack, from_torch, is_host_dlpack, is_torch
from sigdnn.graph.layout import is_non_overlapping, span_elements
from sigdnn.graph.tensor import Tensor
from sigdnn.runtime.device import CPU, Device


def strided_view(
    arena: Any, offset: int, dims: tuple[int, ...], strides: tuple[int, ...], dtype: DataType
) -> np.ndarray:
    item = dtype.itemsize
    return np.ndarray(dims, dtype=dtype.numpy, buffer=arena, offset=offset, strides=tuple(s * item for s in strides))


def _layout_hint(shape: tuple[int, ...], tensor: Tensor) -> str:
    """Arrays take logical dims (N, C, spatial...) whatever the layout: say so when the shape is a permutation."""
    if sorted(shape) == sorted(tensor.dims):  # a permutation (equal sorted lists have equal lengths)
        return (
            "; arrays take the logical dims (N, C, spatial...) whatever the memory layout: for a channels-last "
            "array pass a view in logical order, e.g. a.transpose(0, 3, 1, 2)"
        )
    return ""


class HostMemory:
    """Buffers of the reference backend."""

    device: Device = CPU
    keeps_scratch: bool = True
    """A plan keeps its arena and workspace between runs (no allocation, no page faults, no views to remake);
    outputs never live there, so a caller's results are never overwritten by the next run."""

    def session(self) -> HostMemory:
        """Per-run state; host buffers need none."""
        return self

    def arena(self, nbytes: int) -> np.ndarray:
        try:
            return np.empty(max(nbytes, 1), dtype=np.uint8)
        except (MemoryError, ValueError) as e:  # within Limits, but more than this host has
            raise ExecutionError(f"cannot allocate the {nbytes}-byte arena for virtual tensors: {e}") from None

    def workspace(self, nbytes: int) -> np.ndarray | None:
        """The steps' shared scratch, or None when no step asks for any."""
        return self.arena(nbytes) if nbytes else None

    def view(self, arena: np.ndarray, offset: int, tensor: Tensor, dtype: DataType) -> np.ndarray:
        return strided_view(arena, offset, tensor.dims, tensor.strides, dtype)

    def accept(self, obj: Any, tensor: Tensor, dtype: DataType, writable: bool) -> np.ndarray:
        """A caller's array for ``tensor``: logical shape and dtype must match; any strides."""
        where = f"tensor '{tensor.name}' (uid {tensor.uid})"
        if is_torch(obj):
            obj = from_torch(obj, where)
        elif not isinstance(obj, np.ndarray) and is_host_dlpack(obj):
            obj = from_dlpack(obj, where)
        if not isinstance(obj, np.ndarray):
            if hasattr(obj, "__cuda_array_interface__") or hasattr(obj, "__dlpack__"):
                raise VariantPackError(
                    f"{where}: got a device buffer ({type(obj).__name__}); the reference backend takes host arrays"
                )
            if not hasattr(obj, "__array__"):
                raise VariantPackError(f"{where}: expected a NumPy array, got {type(obj).__name__}")
            try:
                obj = np.asarray(obj)
            except Exception as e:  # a foreign __array__ may raise anything
                raise VariantPackError(
                    f"{where}: {type(obj).__name__} could not be converted to a NumPy array: {type(e).__name__}: {e}"
                ) from None
        if obj.dtype != dtype.numpy:
            raise VariantPackError(f"{where}: dtype {obj.dtype} does not match the graph's {dtype}")
        if obj.shape != tensor.dims:
            raise VariantPackError(
                f"{where}: shape {list(obj.shape)} does not match the graph's dims {list(tensor.dims)}"
                + _layout_hint(obj.shape, tensor)
            )
        if writable and not obj.flags.writeable:
            raise VariantPackError(f"{where}: output array is read-only")
        if writable and not is_non_overlapping(obj.shape, obj.strides, obj.itemsize):
            raise VariantPackError(
                f"{where}: output array's elements overlap (strides {list(obj.strides)} bytes); "
                "several results would land on one element"
            )
        return obj

    def new_output(self, tensor: Tensor, dtype: DataType) -> np.ndarray:
        """An array with the tensor's logical dims laid out with its declared strides (NHWC stays NHWC)."""
        try:
            span = np.empty(span_elements(tensor.dims, tensor.strides), dtype=dtype.numpy)
            return strided_view(span, 0, tensor.dims, tensor.strides, dtype)
        except (MemoryError, ValueError) as e:  # within Limits, but more than this host has
            raise ExecutionError(
                f"cannot allocate output tensor '{tensor.name}' (uid {tensor.uid}) {dtype}{list(tensor.dims)}: {e}"
            ) from None

    def scalar(self, value: np.ndarray, tensor: Tensor, dtype: DataType) -> np.ndarray:
        return np.full(tensor.dims, value, dtype=dtype.numpy)

    def deliver(self, array: np.ndarray, to_host: bool) -> np.ndarray:
        return array

    def snapshot(self, array: np.ndarray, to_host: bool = True) -> np.ndarray:
        """A copy that outlives the arena slot's reuse (on the host either way)."""
        return np.array(array)

    def synchronize(self) -> None:
        pass

    @property
    def stream(self) -> None:
        return None
