"""Where generated kernels are compiled and launched: cuTile on a GPU, or the NumPy emulator.

A backend turns a KernelSpec into a launchable kernel (once per spec, cached),
makes the 1-D views a kernel reads and writes, and launches. The cuTile one
lives in ``kernels`` (it imports cuda.tile); the emulated one here runs the
same generated text on NumPy arrays, for tests without a GPU.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

import numpy as np

from sigdnn.plan_builders.cutile import codegen, emulator
from sigdnn.plan_builders.cutile.codegen import KernelSpec, kernel_name


def source_of(spec: Any) -> tuple[str, str]:
    """(name, module text without the ``ct`` import) of a pointwise KernelSpec, or of a spec that writes its own.

    A spec that writes its own text (a matmul spec, a row / channel / reduction ``KernelSource``) has a
    ``name`` and a ``source()``; it is its own cache key, so equal specs share one compiled kernel.
    """
    if isinstance(spec, KernelSpec):
        return kernel_name(spec), codegen.generate(spec)
    return spec.name, spec.source()


def cache_key(spec: Any) -> Any:
    """What one compiled kernel serves: a pointwise spec without its sizes, any other spec as it is."""
    return spec.text_key() if isinstance(spec, KernelSpec) else spec


class EmulatedGpu:
    """A Device.context that asks the cuTile builders for emulated kernels (buffers are NumPy arrays)."""

    sm_count = 3  # few: a persistent kernel's blocks each walk several tiles of a small test problem
    name = "emulated cuTile (NumPy)"  # what autotune's cache keys name as the device

    def __init__(self) -> None:
        self.kernel_backend = EmulatedBackend()


class EmulatedBackend:
    """Generated kernels run block by block on NumPy arrays (see ``emulator``)."""

    def __init__(self) -> None:
        self._kernels: dict[KernelSpec, Any] = {}
        self._lock = threading.Lock()
        self.compiled = 0  # how many distinct kernels were generated (tests check the cache)

    def kernel(self, spec: KernelSpec) -> Any:
        with self._lock:
            key = cache_key(spec)
            found = self._kernels.get(key)
            if found is None:
                name, text = source_of(spec)
                namespace: dict[str, Any] = {"ct": emulator, "__name__": name}
                exec(compile(text, f"<{name}>", "exec"), namespace)
                namespace["fma"] = emulator.exact_fma
                found = self._kernels[key] = namespace["kernel"]
                self.compiled += 1
            return found

    @staticmethod
    def view1d(array: Any, n: int, as_bytes: bool, offset: int = 0) -> np.ndarray:
        """``n`` elements from element ``offset`` of a NumPy array, or of a DeviceArray over host memory (tests)."""
        dtype = np.dtype(np.uint8) if as_bytes else array.dtype
        address = array.__array_interface__["data"][0] if isinstance(array, np.ndarray) else array.ptr
        raw = (ctypes.c_char * max(n * dtype.itemsize, 1)).from_address(address + offset * dtype.itemsize)
        return np.frombuffer(raw, dtype=dtype, count=n)

    @staticmethod
    def view(array: Any, shape: tuple[int, ...], strides: tuple[int, ...], dtype: Any, offset: int = 0) -> np.ndarray:
        """A strided view (element strides) of ``dtype`` from element ``offset`` of a NumPy array or host DeviceArray."""
        dtype = np.dtype(dtype)
        address = array.__array_interface__["data"][0] if isinstance(array, np.ndarray) else array.ptr
        address += offset * dtype.itemsize
        span = sum((d - 1) * s for d, s in zip(shape, strides, strict=True)) + 1 if all(shape) else 0
        raw = (ctypes.c_char * max(span * dtype.itemsize, 1)).from_address(address)
        flat = np.frombuffer(raw, dtype=dtype, count=span)
        return np.lib.stride_tricks.as_strided(flat, shape, tuple(s * dtype.itemsize for s in strides))

    @staticmethod
    def launch(stream: Any, grid: tuple[int, int, int], kernel: Any, args: tuple[Any, ...]) -> None:
        emulator.launch(stream, grid, kernel, args)


def backend_for(context: Any) -> Any:
    """The backend a Device.context asks for (``kernel_backend``: the emulator in tests), else cuTile."""
    backend = getattr(context, "kernel_backend", None)
    if backend is not None:
        return backend
    from sigdnn.plan_builders.cutile.kernels import CUTILE

    return CUTILE
