"""Device memory for the GPU backend: caller buffers in, outputs back out.

Device buffers (torch, CuPy, anything with ``__cuda_array_interface__`` or
``__dlpack__``) are used in place and must have the graph's strides, since
plans are specialised on them at prepare. Host NumPy arrays are copied in
(laid out with the declared strides) and outputs given as NumPy arrays are
copied back when the run ends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import VariantPackError
from sigdnn.executor.host import strided_view
from sigdnn.graph.layout import span_elements
from sigdnn.graph.tensor import Tensor
from sigdnn.runtime.device import Device


class GpuMemory:
    """Owns the GpuContext (device + stream) of one executor."""

    def __init__(self, device_id: int = 0) -> None:
        from sigdnn.runtime.cuda import GpuContext

        self.context = GpuContext(device_id)
        self.device = Device("gpu", self.context)

    def session(self) -> GpuRun:
        return GpuRun(self.context)


class GpuRun:
    """The buffers of one execute() call."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self.stream = context.stream_handle  # what step plans enqueue on: a raw CUstream
        self._copy_back: dict[int, np.ndarray] = {}

    def _strided(self, tensor: Tensor, dtype: DataType) -> Any:
        nbytes = span_elements(tensor.dims, tensor.strides) * dtype.itemsize
        return self.context.view(self.context.allocate(nbytes), 0, tensor.dims, tensor.strides, dtype.numpy)

    def _upload(self, host: np.ndarray, tensor: Tensor, dtype: DataType) -> Any:
        span = np.empty(span_elements(tensor.dims, tensor.strides), dtype=dtype.numpy)
        strided_view(span, 0, tensor.dims, tensor.strides, dtype)[...] = host
        device = self._strided(tensor, dtype)
        self.context.copy_into(device.as_strided(span.shape, (1,)), span)
        return device

    def arena(self, nbytes: int) -> Any:
        return self.context.allocate(nbytes)

    def workspace(self, nbytes: int) -> Any:
        """The steps' shared scratch as a byte DeviceArray, or None when no step asks for any."""
        if not nbytes:
            return None
        return self.context.view(self.context.allocate(nbytes), 0, (nbytes,), None, np.uint8)

    def view(self, arena: Any, offset: int, tensor: Tensor, dtype: DataType) -> Any:
        return self.context.view(arena, offset, tensor.dims, tensor.strides, dtype.numpy)

    def accept(self, obj: Any, tensor: Tensor, dtype: DataType, writable: bool) -> Any:
        where = f"tensor '{tensor.name}' (uid {tensor.uid})"
        if isinstance(obj, np.ndarray):
            if obj.dtype != dtype.numpy or obj.shape != tensor.dims:
                raise VariantPackError(
                    f"{where}: got {obj.dtype}{list(obj.shape)}, the graph has {dtype}{list(tensor.dims)}"
                )
            device = self._upload(obj, tensor, dtype)
            if writable:
                if not obj.flags.writeable:
                    raise VariantPackError(f"{where}: output array is read-only")
                self._copy_back[id(device)] = obj
            return device
        try:
            device = self.context.wrap(obj)
        except (TypeError, ValueError) as e:
            raise VariantPackError(f"{where}: {e}") from None
        if device.dtype != dtype.numpy or device.shape != tensor.dims:
            raise VariantPackError(
                f"{where}: got {device.dtype}{list(device.shape)}, the graph has {dtype}{list(tensor.dims)}"
            )
        significant = [(s, t) for d, s, t in zip(tensor.dims, device.strides, tensor.strides) if d > 1]
        if any(s != t for s, t in significant):
            raise VariantPackError(
                f"{where}: device strides {list(device.strides)} differ from the graph's {list(tensor.strides)}"
            )
        return device

    def new_output(self, tensor: Tensor, dtype: DataType) -> Any:
        return self._strided(tensor, dtype)

    def scalar(self, value: np.ndarray, tensor: Tensor, dtype: DataType) -> Any:
        return self._upload(np.full(tensor.dims, value, dtype=dtype.numpy), tensor, dtype)

    def deliver(self, array: Any, to_host: bool) -> Any:
        target = self._copy_back.get(id(array))
        if target is not None:
            target[...] = self.context.to_host(array)
            return target
        return self.context.to_host(array) if to_host else array

    def snapshot(self, array: Any) -> np.ndarray:
        """A host copy, taken now (synchronizes the stream)."""
        return self.context.to_host(array)

    def synchronize(self) -> None:
        self.context.synchronize()
