"""Where the GPU reference's kernels run: cuTile on a GPU, or the NumPy emulator in CPU tests.

``kernels/tiles.py`` is the library's device code (with, where CuTe DSL is
installed, the tensor-core GEMM of ``kernels/dmma_gemm.py``). On a GPU it is
imported as a module (cuTile reads kernel source through ``inspect``); under
test its text runs with ``ct`` bound to ``plan_builders.cutile.emulator``,
chosen when the device's context asks for emulated kernels (its
``kernel_backend`` is the emulator's), as the cuTile builders' tests do.
``Gpu`` is one device's memory and launches for one run of a plan: flat
float64 / int64 scratch arrays, index maps uploaded from the host, and raw
1-D views of the caller's (strided, any dtype) buffers.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import math
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from sigdnn.errors import ExecutionError
from sigdnn.plan_builders.gpu_reference.scratch import Scratch, scratch_for

KERNEL_FILE = Path(__file__).parent / "kernels" / "tiles.py"
IMPORT_LINE = "import cuda.tile as ct\n"
TILE = 1024  # elements a block of the flat kernels handles
ROW_TILE = 256  # lanes of a row reduction
GEMM_TILE = (128, 64, 8)  # (rows, columns, depth) of a GEMM block's float64 tile: DFMA, no spills (sm_90 cubin)
OUTER_TILE = (16, 256)  # (rows, columns) of a gather_outer block
ROWS_TILE = (4096, 64)  # (elements, most columns) of a gather_rows block: its columns the power of 2 >= a group's
ORDERED_ROWS = 128  # rows of a block of the in-order row sum
INTEGER_GEMM_TILE = (32, 32)  # (rows, columns) of an int64 GEMM block
GRID_LIMITS = ((1 << 24) - 1, 65535, 65535)  # cuTile's bound on grid x (24 bits), CUDA's on y and z
BYTE_VIEWED = ("bool", "float8_e4m3fn", "float8_e5m2")  # dtypes a kernel reads as bytes

_modules: dict[bool | str, ModuleType] = {}


def cutile_unavailable_reason() -> str | None:
    """None when cuTile and a GPU are present, else why the GPU reference cannot run."""
    from sigdnn.runtime.cuda import dsl_unavailable_reason

    return dsl_unavailable_reason("cuda.tile", "cuda-tile")


def dmma_gemm() -> ModuleType | None:
    """The DMMA GEMM module (``kernels/dmma_gemm.py``) where CuTe DSL imports, else None (the cuTile GEMM serves).

    A CuTe DSL that imports but cannot build the module (its inline-PTX hooks are not public API and may move)
    gets a warning naming why, and the cuTile GEMM: slower, as exact."""
    if "dmma" not in _modules:
        from sigdnn.runtime.cuda import dsl_unavailable_reason

        found = None
        if dsl_unavailable_reason("cutlass.cute", "nvidia-cutlass-dsl") is None:
            try:
                found = importlib.import_module("sigdnn.plan_builders.gpu_reference.kernels.dmma_gemm")
            except Exception as e:  # any failure: the cuTile GEMM serves
                warnings.warn(
                    f"the GPU reference's DMMA GEMM is unavailable ({type(e).__name__}: {e}); its cuTile GEMM serves",
                    RuntimeWarning,
                    stacklevel=2,
                )
        _modules["dmma"] = found  # type: ignore[assignment]
    return _modules["dmma"]


def is_emulated(context: Any) -> bool:
    """Whether a Device.context asks for emulated kernels (the CPU tests' host-memory GPU)."""
    from sigdnn.plan_builders.cutile.backend import EmulatedBackend

    return isinstance(getattr(context, "kernel_backend", None), EmulatedBackend)


def kernel_module(emulated: bool) -> ModuleType:
    """tiles.py compiled by cuTile, or its text run on the emulator (loaded once per process)."""
    found = _modules.get(emulated)
    if found is None:
        if emulated:
            found = emulated_module(KERNEL_FILE.read_text())
        else:
            spec = importlib.util.spec_from_file_location("sigdnn_gpu_reference_tiles", KERNEL_FILE)
            assert spec is not None and spec.loader is not None
            found = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(found)
        _modules[emulated] = found
    return found


def emulated_module(text: str) -> ModuleType:
    """Kernel source text run with ``ct`` bound to the NumPy emulator."""
    from sigdnn.plan_builders.cutile import emulator

    module = ModuleType("sigdnn_gpu_reference_tiles_emulated")
    module.__dict__["ct"] = emulator
    exec(compile(text.replace(IMPORT_LINE, "", 1), str(KERNEL_FILE), "exec"), module.__dict__)
    return module


def kernel_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype a kernel reads a buffer of ``dtype`` as: bool and fp8 as bytes (cuTile's arrays have neither)."""
    return np.dtype(np.uint8) if np.dtype(dtype).name in BYTE_VIEWED else np.dtype(dtype)


def span(dims: tuple[int, ...], strides: tuple[int, ...]) -> int:
    """Elements from a tensor's first to its last, plus one (0 when it has none)."""
    return sum((d - 1) * s for d, s in zip(dims, strides, strict=True)) + 1 if math.prod(dims) else 0


KEPT_UPLOADS = 4096  # small read-only uploads (index maps, constants) kept per device context, least recent out
KEPT_UPLOAD_ELEMENTS = 1 << 16  # larger ones are uploaded each time
_kept: weakref.WeakKeyDictionary[Any, OrderedDict[tuple[str, tuple[int, ...], bytes], Any]] = (
    weakref.WeakKeyDictionary()
)
# per device context: id of a read-only host array -> (a weak reference to it, its device copy), dropped with it
_held: weakref.WeakKeyDictionary[Any, dict[int, tuple[weakref.ref, Any]]] = weakref.WeakKeyDictionary()


@contextmanager
def run_on(context: Any, stream: Any) -> Iterator[Gpu]:
    """A Gpu for one run of a plan, whose scratch arrays come from the context's kept buffer (``scratch``) on a
    GPU; the run ends when the device has finished it (the run's stream and the context's)."""
    if is_emulated(context):
        yield Gpu(context, stream)
        return
    with scratch_for(context).run() as scratch:
        yield Gpu(context, stream, scratch)
        if stream is not None and int(stream) != context.stream_handle:
            context.wait_for(int(stream))
        context.synchronize()


class Gpu:
    """One device's scratch memory, uploads and launches, for one execution of a plan (``scratch``: where its
    arrays come from, else each is allocated)."""

    def __init__(self, context: Any, stream: Any, scratch: Scratch | None = None) -> None:
        self.context = context
        self.stream = stream
        self.emulated = is_emulated(context)
        self.kernels = kernel_module(self.emulated)
        self.scratch = scratch

    def on_device(
        self, buffers: Mapping[str, Any], outputs: Iterable[str]
    ) -> tuple[dict[str, Any], Callable[[], None]]:
        """The buffers as device arrays, and what copies the outputs back: host arrays handed to a plan on a
        real GPU (validation's runs of single nodes) are staged; device arrays (and the emulator's host
        arrays) pass as they are."""
        if self.emulated:
            return dict(buffers), lambda: None
        staged = {p: self.context.to_device(b) if isinstance(b, np.ndarray) else b for p, b in buffers.items()}
        back = [(buffers[p], staged[p]) for p in outputs if p in buffers and isinstance(buffers[p], np.ndarray)]

        def finish() -> None:
            for host, device in back:
                np.copyto(host, self.context.to_host(device))

        return staged, finish

    def empty(self, n: int, dtype: Any) -> Any:
        """A flat scratch array of ``n`` elements."""
        if self.emulated:
            return np.empty(n, dtype)
        if self.scratch is not None:
            return self.scratch.take(n, dtype)
        return self.context.empty((max(n, 1),), dtype)

    def upload(self, host: np.ndarray) -> Any:
        """A flat device copy of a host array (index maps, per-row constants)."""
        host = np.ascontiguousarray(host).reshape(-1)
        if self.emulated:
            return host.copy()
        return self.context.to_device(host if host.size else np.zeros(1, host.dtype))

    def upload_kept(self, host: np.ndarray) -> Any:
        """A device copy of a small host array no kernel writes (an index map, a constant), uploaded once per
        device context and kept: validation runs every node many times with the same maps (a batch-64 ResNet-50
        step made 55,000 uploads a run); a read-only array, of any size, by identity (``_held_upload``). Enqueued
        on the context's stream like every upload, so the first reader, on that stream, finds it there."""
        host = np.ascontiguousarray(host)
        if not host.flags.writeable:
            return self._held_upload(host)
        if host.size > KEPT_UPLOAD_ELEMENTS:
            return self.upload(host)
        kept = _kept.setdefault(self.context, OrderedDict())
        key = (host.dtype.str, host.shape, host.tobytes())
        found = kept.get(key)
        if found is None:
            found = kept[key] = self.upload(host)
            if len(kept) > KEPT_UPLOADS:
                kept.popitem(last=False)
        else:
            kept.move_to_end(key)
        return found

    def _held_upload(self, host: np.ndarray) -> Any:
        """The device copy of a read-only host array (a plan's own map, frozen when the plan was built), found
        again by identity, whatever its size, without reading its bytes (hashing a conv's maps cost about 0.5 ms a
        call); kept while the array lives."""
        held = _held.setdefault(self.context, {})
        key = id(host)
        entry = held.get(key)
        if entry is not None and entry[0]() is host:
            return entry[1]
        found = self.upload(host)
        held[key] = (weakref.ref(host, lambda _, key=key, held=held: held.pop(key, None)), found)
        return found

    @property
    def no_index(self) -> Any:
        """The index argument of a dense gather or scatter, which never reads it (one int64 element)."""
        return self.upload_kept(np.zeros(1, np.int64))

    def download(self, array: Any, n: int) -> np.ndarray:
        """The first ``n`` elements of a flat array, on the host."""
        if self.emulated:
            return np.array(array[:n])
        return self.context.to_host(array)[:n]

    def raw(self, buffer: Any, dims: tuple[int, ...], strides: tuple[int, ...]) -> Any:
        """A caller's buffer as the flat array of its span, in the dtype a kernel reads (no copy)."""
        from sigdnn.runtime.device_array import DeviceArray

        if not isinstance(buffer, (np.ndarray, DeviceArray)):
            raise ExecutionError(f"the GPU reference takes device arrays, not {type(buffer).__name__}")
        dtype = np.dtype(buffer.dtype)
        n = max(span(dims, strides), 1)
        as_read = kernel_dtype(dtype)
        if isinstance(buffer, np.ndarray):
            address = buffer.__array_interface__["data"][0]
            raw = (ctypes.c_char * (n * dtype.itemsize)).from_address(address)
            return np.frombuffer(raw, dtype=as_read, count=n)
        return DeviceArray(buffer.ptr, (n,), (1,), as_read, owner=buffer.owner, device_id=buffer.device_id)

    def shaped(self, flat: Any, shape: tuple[int, ...]) -> Any:
        """A packed flat array seen with ``shape`` (what the tiled 2-D / 3-D kernels take)."""
        if self.emulated:
            return flat[: math.prod(shape)].reshape(shape)
        from sigdnn.graph.layout import packed_strides
        from sigdnn.runtime.device_array import DeviceArray

        return DeviceArray(
            flat.ptr, shape, packed_strides(shape), flat.dtype, owner=flat.owner, device_id=flat.device_id
        )

    def part(self, flat: Any, offset: int, n: int) -> Any:
        """Elements offset .. offset + n - 1 of a flat array, as a flat array (no copy)."""
        if self.emulated:
            return flat[offset : offset + n]
        from sigdnn.runtime.device_array import DeviceArray

        address = flat.ptr + offset * flat.itemsize
        return DeviceArray(address, (n,), (1,), flat.dtype, owner=flat.owner, device_id=flat.device_id)

    def launch(self, name: str, grid: tuple[int, ...], *args: Any) -> None:
        if math.prod(grid) == 0:
            return
        if any(g > limit for g, limit in zip(grid, GRID_LIMITS)):
            raise ExecutionError(f"the GPU reference's {name} kernel needs a grid of {grid}, past {GRID_LIMITS}")
        kernel = getattr(self.kernels, name)
        if self.emulated:
            from sigdnn.plan_builders.cutile import emulator

            with np.errstate(all="ignore"):  # a GPU raises no floating-point exceptions
                emulator.launch(self.stream, grid, kernel, args)
        else:
            import cuda.tile as ct

            ct.launch(self.stream, grid, kernel, args)

    def gemm(self, a: Any, b: Any, out: Any, shape: tuple[int, int, int, int]) -> None:
        """out = a @ b over packed float64 (batch, M, K) and (batch, K, N) arrays: DMMA on the tensor cores where
        CuTe DSL is installed, else the cuTile kernel (rank-1 DFMA updates; the emulator runs that one)."""
        batch, m, n, k = shape
        dmma = None if self.emulated else dmma_gemm()
        if dmma is None:
            operands = (self.shaped(x, s) for x, s in ((a, (batch, m, k)), (b, (batch, k, n)), (out, (batch, m, n))))
            grid = (math.ceil(m / GEMM_TILE[0]), math.ceil(n / GEMM_TILE[1]), batch)
            self.launch("gemm", grid, *operands, k, *GEMM_TILE)
            return
        grid = (math.ceil(n / dmma.TILE_N), math.ceil(m / dmma.TILE_M), batch)
        if any(g > limit for g, limit in zip(grid, GRID_LIMITS)):
            raise ExecutionError(f"the GPU reference's DMMA GEMM needs a grid of {grid}, past {GRID_LIMITS}")
        if math.prod(grid):  # (K = 0 stores zeros)
            dmma.gemm(a.ptr, b.ptr, out.ptr, batch, m, n, k, self.stream)

    def constant_array(self, value: float | int, dtype: Any, rank: int) -> Any:
        """A one-element Array of ``value`` (shape (1,) * rank), uploaded once per value and dtype (``upload_kept``)."""
        from sigdnn.plan_builders.gpu_reference.arrays import Array

        return Array(self, self.upload_kept(np.full(1, value, dtype)), (1,) * rank, np.dtype(dtype))

    def constant(self, name: str) -> int:
        """A mode or encoding constant of tiles.py."""
        return int(getattr(self.kernels, name))
