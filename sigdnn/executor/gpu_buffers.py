"""Caller buffers on the GPU: torch tensors recognised, device buffers wrapped and checked, host arrays staged,
views made at byte offsets, and the outputs that lend their memory to guests chosen (``gpu_memory`` runs with
them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import VariantPackError
from sigdnn.executor.host import strided_view
from sigdnn.executor.hosting import in_place
from sigdnn.graph.layout import span_elements
from sigdnn.graph.tensor import Tensor
from sigdnn.runtime.device_array import DeviceArray

TORCH_TYPES: set[type] = set()  # types seen to be torch's (the module-name test cost ~0.3 us a call)


def is_torch(obj: Any) -> bool:
    kind = type(obj)
    if kind in TORCH_TYPES:
        return True
    if kind.__module__.startswith("torch"):
        TORCH_TYPES.add(kind)
        return True
    return False


def current_torch_stream(objs: Any) -> int | None:
    """torch's current stream (raw handle) on the device of the first torch CUDA tensor among ``objs``.

    Read through ``torch._C._cuda_getCurrentRawStream`` (as Triton does):
    ``torch.cuda.current_stream`` builds a Stream object, several times the cost.
    """
    for obj in objs:
        if is_torch(obj) and getattr(obj, "is_cuda", False):
            import torch

            return int(torch._C._cuda_getCurrentRawStream(obj.get_device()))
    return None


def torch_identity(obj: Any) -> tuple[Any, ...] | None:
    """What a torch tensor's device view is made of (None for other objects): equal identities, equal views."""
    if not is_torch(obj):
        return None
    return (obj.data_ptr(), obj.get_device(), obj.dtype, obj.shape, obj.stride())


def new_strided(context: Any, tensor: Tensor, dtype: DataType) -> Any:
    nbytes = span_elements(tensor.dims, tensor.strides) * dtype.itemsize
    return context.view(context.allocate(nbytes), 0, tensor.dims, tensor.strides, dtype.numpy)


def upload(context: Any, host: np.ndarray, device: Any, tensor: Tensor, dtype: DataType) -> None:
    """Copy ``host`` (logical dims) into ``device`` laid out with the tensor's strides."""
    span = np.empty(span_elements(tensor.dims, tensor.strides), dtype=dtype.numpy)
    strided_view(span, 0, tensor.dims, tensor.strides, dtype)[...] = host
    context.copy_into(device.as_strided(span.shape, (1,)), span)


def wrap_device(context: Any, obj: Any, tensor: Tensor, dtype: DataType) -> Any:
    """A caller's device buffer, checked against the executor's device and the tensor (dtype, dims, strides of
    dims > 1)."""
    where = f"tensor '{tensor.name}' (uid {tensor.uid})"
    try:
        device = context.wrap(obj)
    except (TypeError, ValueError) as e:
        raise VariantPackError(f"{where}: {e}") from None
    if device.device_id != context.device_id:
        raise VariantPackError(f"{where}: on GPU {device.device_id}, the executor runs on GPU {context.device_id}")
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


def alias_view(buffer: Any, offset: int, tensor: Tensor, dtype: DataType) -> DeviceArray:
    """``tensor`` as a view ``offset`` bytes into ``buffer`` (a caller's input it views, or the buffer an output lends
    its guests), laid out with its declared strides and dtype."""
    return DeviceArray(buffer.ptr + offset, tensor.dims, tensor.strides, dtype.numpy, owner=buffer,
                       device_id=buffer.device_id)  # fmt: skip


def lending_buffers(
    hosts: set[int],
    buffers: Mapping[int, Any],
    spans: list[tuple[int, int]],
    spare: Callable[[int], Any],
    fresh: set[int] | frozenset[int] = frozenset(),
) -> dict[int, Any]:
    """Each lending output's buffer for its guests this run (``plan.memory.hosted``): the caller's own where
    ``in_place`` allows, else ``spare(uid)``, memory of the output's size that the run does not share.
    ``spans``: (uid, bytes) of every caller buffer; ``fresh``: outputs the caller did not give (a bound plan
    allocates them anew each run, and guests moving with them would rebind their steps every run)."""
    usable = in_place({uid: (buffers[uid].ptr, nbytes) for uid, nbytes in spans}, hosts) - fresh
    return {uid: buffers[uid] if uid in usable else spare(uid) for uid in hosts}


def check_host(obj: np.ndarray, tensor: Tensor, dtype: DataType, writable: bool) -> None:
    where = f"tensor '{tensor.name}' (uid {tensor.uid})"
    if obj.dtype != dtype.numpy or obj.shape != tensor.dims:
        raise VariantPackError(f"{where}: got {obj.dtype}{list(obj.shape)}, the graph has {dtype}{list(tensor.dims)}")
    if writable and not obj.flags.writeable:
        raise VariantPackError(f"{where}: output array is read-only")
