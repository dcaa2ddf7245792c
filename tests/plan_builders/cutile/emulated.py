"""Run the GPU backend on the CPU: cuTile plans through the emulator, over NumPy or host-backed device buffers.

``emulated_executor()`` is a real ``Executor("gpu")`` whose memory is host
memory presented as a GPU device carrying an ``EmulatedGpu`` context, with
the cuTile builders made available: prepare (keys, fusion claims, builder
choice, memory plan) and execute run unchanged, and the generated kernels
run through ``sigdnn.plan_builders.cutile.emulator``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import attrs
import numpy as np
import pytest

from sigdnn.dtypes import DataType
from sigdnn.executor import Executor
from sigdnn.executor.gpu_memory import GpuMemory
from sigdnn.executor.host import HostMemory, strided_view
from sigdnn.graph.layout import span_elements
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.cutile import pointwise
from sigdnn.plan_builders.cutile.backend import EmulatedBackend, EmulatedGpu
from sigdnn.registry import Registry
from sigdnn.runtime.cuda import GpuContext
from sigdnn.runtime.device import Device
from sigdnn.runtime.device_array import DeviceArray


class EmulatedGpuMemory(HostMemory):
    """Host buffers laid out with the graph's strides, as GpuMemory lays out device buffers."""

    def __init__(self) -> None:
        self.context = EmulatedGpu()
        self.device = Device("gpu", self.context)
        self._copy_back: dict[int, np.ndarray] = {}

    def session(self) -> EmulatedGpuMemory:
        self._copy_back = {}
        return self

    def workspace(self, nbytes: int) -> np.ndarray | None:
        """The steps' scratch filled with 0xFF bytes (NaN as a float, -1 as an integer), as a GPU's is never
        cleared: a launch that reads workspace no launch of the run wrote fails instead of reading what an earlier
        run happened to leave in the same host memory."""
        scratch = super().workspace(nbytes)
        if scratch is not None:
            scratch.fill(0xFF)
        return scratch

    def _strided(self, tensor: Tensor, dtype: DataType) -> np.ndarray:
        span = np.empty(span_elements(tensor.dims, tensor.strides) * dtype.itemsize, np.uint8)
        return strided_view(span, 0, tensor.dims, tensor.strides, dtype)

    def accept(self, obj: Any, tensor: Tensor, dtype: DataType, writable: bool) -> np.ndarray:
        caller = super().accept(obj, tensor, dtype, writable)
        laid_out = self._strided(tensor, dtype)
        laid_out[...] = caller
        if writable:
            self._copy_back[id(laid_out)] = caller
        return laid_out

    def new_output(self, tensor: Tensor, dtype: DataType) -> np.ndarray:
        return self._strided(tensor, dtype)

    def alias(self, buffer: np.ndarray, offset: int, tensor: Tensor, dtype: DataType) -> np.ndarray:
        """A view ``offset`` bytes into a laid-out buffer (an input's, or a lending output's), as ``dtype``
        (a guest's may differ from its host's)."""
        item = dtype.itemsize
        nbytes = offset + span_elements(tensor.dims, tensor.strides) * item
        raw = np.lib.stride_tricks.as_strided(buffer, (-(-nbytes // buffer.itemsize),), (buffer.itemsize,))
        raw = raw.view(np.uint8)[:nbytes]
        return np.lib.stride_tricks.as_strided(
            raw[offset:].view(dtype.numpy), tensor.dims, tuple(s * item for s in tensor.strides)
        )

    def lenders(self, plan: Any, buffers: dict[int, np.ndarray]) -> dict[int, np.ndarray]:
        """Each lending output's own laid-out buffer: a private copy here, so it never shares the caller's memory."""
        return {host: buffers[host] for host, _ in plan.memory.hosted.values()}

    def scalar(self, value: np.ndarray, tensor: Tensor, dtype: DataType) -> np.ndarray:
        laid_out = self._strided(tensor, dtype)
        laid_out[...] = value
        return laid_out

    def deliver(self, array: np.ndarray, to_host: bool) -> np.ndarray:
        caller = self._copy_back.get(id(array))
        if caller is not None:
            caller[...] = array
            return caller
        return np.ascontiguousarray(array)


def make_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cuTile builders report themselves available (their kernels will be emulated)."""
    monkeypatch.setattr(pointwise, "unavailable_reason", lambda: None)
    from sigdnn.plan_builders.cutile import fusion

    monkeypatch.setattr(fusion, "unavailable_reason", lambda: None)


def emulated_executor(**kwargs) -> Executor:
    ex = Executor("gpu", **kwargs)
    ex._memory = EmulatedGpuMemory()
    return ex


class HostGpuContext(GpuContext):
    """A GpuContext whose "device" memory is host memory and whose kernels are emulated.

    DeviceArrays point at NumPy buffers, so everything the GPU executor does on
    the host (binding plans once, staging, pooling, rebinding when a caller's
    buffer moves) runs here as it does on a GPU; only CUDA graphs need one.
    """

    name = "host-backed GPU context (emulated cuTile)"  # what autotune's cache keys name as the device
    sm_count = EmulatedGpu.sm_count  # the emulated GPU's: persistent kernels split work as there

    def __init__(self) -> None:
        self.device_id = 0
        self.stream_handle = 0
        self.kernel_backend = EmulatedBackend()
        self.allocations = 0

    def allocate(self, nbytes: int) -> Any:
        self.allocations += 1
        buf = np.zeros(max(int(nbytes), 1), np.uint8)
        return SimpleNamespace(handle=buf.ctypes.data, size=buf.nbytes, memory=buf)

    def _copy_h2d(self, dst_ptr: int, host: np.ndarray) -> None:
        ctypes.memmove(dst_ptr, np.ascontiguousarray(host).ctypes.data, host.nbytes)

    def _copy_d2d(self, dst_ptr: int, src_ptr: int, nbytes: int) -> None:
        ctypes.memmove(dst_ptr, src_ptr, nbytes)

    def to_host(self, arr: DeviceArray) -> np.ndarray:
        if arr.size == 0:
            return np.empty(arr.shape, arr.dtype)
        span = sum((d - 1) * s for d, s in zip(arr.shape, arr.strides)) + 1
        raw = np.empty(span, arr.dtype)
        ctypes.memmove(raw.ctypes.data, arr.ptr, raw.nbytes)
        view = np.lib.stride_tricks.as_strided(raw, arr.shape, tuple(s * arr.itemsize for s in arr.strides))
        return np.array(view)

    def synchronize(self) -> None:
        pass


def host_gpu_executor(**kwargs) -> Executor:
    """Executor("gpu") on a HostGpuContext: the GPU memory path (GpuMemory, BoundPlan) with emulated kernels."""
    ex = Executor("gpu", **kwargs)
    ex._memory = GpuMemory(context=HostGpuContext())
    return ex


def assert_fast_path_gives(graph: Any, inputs: dict[str, np.ndarray], validated: dict[str, np.ndarray]) -> None:
    """The GPU's fast path (the plan bound to device memory once, on host memory here) returns the outputs that
    validation's capture path produced, bit for bit: the path validation does not take cannot diverge unseen."""
    bound = host_gpu_executor()
    fast = bound.execute(bound.prepare(graph), inputs)
    for name, value in validated.items():
        np.testing.assert_array_equal(fast[name], value, err_msg=name)


def planted(base: type, plant: Callable[[str], str], engine_id: int = 39999) -> tuple[Registry, str]:
    """A registry of one builder, ``base`` with every launch's kernel text passed through ``plant`` (a test's
    planted bug), and that builder's name (to pin an executor to it)."""

    class Planted(base):  # type: ignore[misc, valid-type]
        name = f"planted.{base.name.split('.', 1)[1]}"
        library = "planted"

        def launches(self, node, graph):  # type: ignore[no-untyped-def]
            launches, nbytes = super().launches(node, graph)
            return [
                attrs.evolve(la, source=attrs.evolve(la.source, text=plant(la.source.text))) for la in launches
            ], nbytes

    Planted.engine_id = engine_id
    registry = Registry(entry_point_group=None)
    registry.register(Planted())
    return registry, Planted.name


def run_blocks_in_reverse(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator runs each launch's blocks last to first: as valid a schedule as any, and the one where a
    block writing past its own share is not overwritten by the later block that owns it."""
    from sigdnn.plan_builders.cutile import emulator

    def reverse(k, args, gx: int, gy: int, gz: int) -> None:  # type: ignore[no-untyped-def]
        for z, y, x in reversed([(z, y, x) for z in range(gz) for y in range(gy) for x in range(gx)]):
            token = emulator._BID.set((x, y, z))
            try:
                k.fn(*args)
            finally:
                emulator._BID.reset(token)

    monkeypatch.setattr(emulator, "_run_blocks", reverse)
