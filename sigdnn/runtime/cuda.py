"""GPU memory and streams through cuda-python's ``cuda.core``.

Nothing GPU-related is imported when this module loads: ``import sigdnn`` must
work on a machine without cuda-python or a GPU. ``cuda.core`` (and
``cuda.bindings`` for the raw copies) are imported on first use. The arrays a
:class:`GpuContext` hands out are :class:`~sigdnn.runtime.device_array.DeviceArray` views.
"""

from __future__ import annotations

import functools
import importlib
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from sigdnn.graph.layout import packed_strides
from sigdnn.runtime.device_array import BFLOAT16, DeviceArray, dtype_from_typestr

# ---------------------------------------------------------------------------
# Lazy imports and availability


@functools.cache
def _cuda_core() -> Any:
    """The cuda.core namespace that holds Device (top level since 0.4)."""
    try:
        import cuda.core as cc

        if hasattr(cc, "Device"):
            return cc
    except ImportError:
        pass
    import cuda.core.experimental as cc  # older cuda-core releases

    return cc


@functools.cache
def _driver() -> Any:
    """cuda.bindings.driver (cuda-python 12.6+), else the legacy cuda.cuda."""
    try:
        from cuda.bindings import driver
    except ImportError:
        from cuda import cuda as driver  # type: ignore[no-redef]
    return driver


def _check(result: Any, what: str) -> Any:
    """Raise on a failed driver call; return its values (cuda.bindings returns (err, ...))."""
    err, *rest = result if isinstance(result, tuple) else (result,)
    driver = _driver()
    if err != driver.CUresult.CUDA_SUCCESS:
        _, msg = driver.cuGetErrorString(err)
        text = msg.decode() if isinstance(msg, bytes) else str(msg)
        raise RuntimeError(f"{what} failed: {err!r} ({text})")
    return rest[0] if len(rest) == 1 else tuple(rest)


@functools.cache
def gpu_unavailable_reason() -> str | None:
    """Why the GPU backend cannot run here, or None when it can. Never raises."""
    try:
        _cuda_core()
    except Exception as exc:  # any failure means "unavailable"
        return f"cuda.core is not importable ({type(exc).__name__}: {exc})"
    try:
        driver = _driver()
        _check(driver.cuInit(0), "cuInit")
        count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
    except Exception as exc:
        return f"no usable CUDA driver ({type(exc).__name__}: {exc})"
    if count < 1:
        return "no CUDA device is visible"
    return None


def visible_gpu_count() -> int:
    """CUDA devices this process sees; 0 where the GPU backend cannot run. Never raises."""
    if gpu_unavailable_reason() is not None:
        return 0
    return int(_check(_driver().cuDeviceGetCount(), "cuDeviceGetCount"))


@functools.cache
def dsl_unavailable_reason(module: str, package: str) -> str | None:
    """Why builders written with the GPU DSL ``module`` cannot run here (no GPU, or ``package`` missing). Never raises."""
    reason = gpu_unavailable_reason()
    if reason is not None:
        return reason
    try:
        importlib.import_module(module)
    except Exception as exc:  # any failure means "unavailable"
        return f"{package} is not importable ({type(exc).__name__}: {exc})"
    return None


def raw_stream(stream: Any) -> int:
    """The CUstream address of a cuda.core Stream, torch/CuPy stream, or int."""
    if isinstance(stream, int):
        return stream
    if hasattr(stream, "__cuda_stream__"):
        return int(stream.__cuda_stream__()[1])
    handle = getattr(stream, "handle", None)
    if handle is not None:
        return int(handle)
    ptr = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream
    if ptr is None:
        ptr = getattr(stream, "ptr", None)  # cupy.cuda.Stream
    if ptr is None:
        raise TypeError(f"not a CUDA stream: {type(stream).__name__}")
    return int(ptr)


# ---------------------------------------------------------------------------
# The context


class GpuContext:
    """One device and one stream; every copy and launch of a plan goes on it."""

    def __init__(self, device_id: int = 0) -> None:
        reason = gpu_unavailable_reason()
        if reason is not None:
            raise RuntimeError(f"GPU backend unavailable: {reason}")
        cc = _cuda_core()
        self.device = cc.Device(device_id)
        self.device.set_current()
        self.device_id = int(device_id)
        self.stream = self.device.create_stream()
        self.stream_handle = raw_stream(self.stream)
        self._order_event: Any = None  # one event, recorded anew for each cross-stream ordering

    # -- memory -------------------------------------------------------------

    def allocate(self, nbytes: int) -> Any:
        """Plain device memory (the device's default memory resource, never managed)."""
        return self.device.allocate(max(int(nbytes), 1), stream=self.stream)

    def view(
        self,
        buffer: Any,
        offset_bytes: int,
        shape: Sequence[int],
        strides: Sequence[int] | None,
        dtype: Any,
    ) -> DeviceArray:
        """A typed view into ``buffer``, checked to stay inside it."""
        dtype = np.dtype(dtype)
        strides = packed_strides(shape) if strides is None else tuple(strides)
        if offset_bytes < 0 or offset_bytes % dtype.itemsize:
            raise ValueError(f"offset {offset_bytes} is not a multiple of {dtype.itemsize}")
        if any(s < 0 for s in strides):
            raise ValueError("negative strides are not supported")
        if math.prod(shape):
            last = sum((d - 1) * s for d, s in zip(shape, strides, strict=True))
            end = offset_bytes + (last + 1) * dtype.itemsize
            if end > int(buffer.size):
                raise ValueError(f"view ends at byte {end}, past the buffer's {buffer.size}")
        return DeviceArray(
            int(buffer.handle) + offset_bytes,
            shape,
            strides,
            dtype,
            owner=buffer,
            device_id=self.device_id,
        )

    def empty(self, shape: Sequence[int], dtype: Any) -> DeviceArray:
        """A new packed array (uninitialised)."""
        dtype = np.dtype(dtype)
        buf = self.allocate(math.prod(shape) * dtype.itemsize)
        return self.view(buf, 0, shape, None, dtype)

    # -- copies -------------------------------------------------------------

    def to_device(self, host: np.ndarray) -> DeviceArray:
        """A packed device copy of ``host``, enqueued on the stream."""
        host = np.ascontiguousarray(host)
        out = self.empty(host.shape, host.dtype)
        self._copy_h2d(out.ptr, host)
        return out

    def copy_into(self, dst: DeviceArray, host: np.ndarray) -> None:
        """Copy ``host`` into the contiguous device array ``dst`` on the stream."""
        host = np.asarray(host)
        if host.shape != dst.shape or host.dtype != dst.dtype:
            raise ValueError(f"host {host.dtype}{list(host.shape)} does not match device {dst.dtype}{list(dst.shape)}")
        if not dst.is_contiguous:
            raise ValueError("copy_into needs a contiguous destination")
        self._copy_h2d(dst.ptr, np.ascontiguousarray(host))

    def to_host(self, arr: DeviceArray) -> np.ndarray:
        """A NumPy copy of ``arr`` (synchronizes the stream)."""
        if arr.size == 0:
            return np.empty(arr.shape, arr.dtype)
        if any(s < 0 for s in arr.strides):
            raise ValueError("negative strides are not supported")
        # Copy the byte span the view covers, then apply its strides on the host:
        # works for packed, padded and broadcast (stride 0) views alike.
        span = sum((d - 1) * s for d, s in zip(arr.shape, arr.strides, strict=True)) + 1
        raw = np.empty(span, arr.dtype)
        driver = _driver()
        _check(
            driver.cuMemcpyDtoHAsync(
                raw.ctypes.data,
                arr.ptr,
                raw.nbytes,
                driver.CUstream(self.stream_handle),
            ),
            "cuMemcpyDtoHAsync",
        )
        self.synchronize()
        if arr.is_contiguous:
            return raw.reshape(arr.shape)
        # as_strided goes through __array_interface__, which cannot spell the ml_dtypes (bfloat16, fp8):
        # stride the bytes as unsigned integers of the same width, then view them as the dtype.
        bits = raw.view(f"u{arr.itemsize}")
        view = np.lib.stride_tricks.as_strided(bits, arr.shape, tuple(s * arr.itemsize for s in arr.strides))
        return np.array(view).view(arr.dtype)

    def copy(self, arr: DeviceArray) -> DeviceArray:
        """A device copy of ``arr`` with its strides, enqueued on the stream (the byte span it covers)."""
        if any(s < 0 for s in arr.strides):
            raise ValueError("negative strides are not supported")
        span = sum((d - 1) * s for d, s in zip(arr.shape, arr.strides, strict=True)) + 1 if arr.size else 0
        buffer = self.allocate(span * arr.itemsize)
        self._copy_d2d(int(buffer.handle), arr.ptr, span * arr.itemsize)
        return DeviceArray(
            int(buffer.handle), arr.shape, arr.strides, arr.dtype, owner=buffer, device_id=self.device_id
        )

    def _copy_d2d(self, dst_ptr: int, src_ptr: int, nbytes: int) -> None:
        if nbytes == 0:
            return
        driver = _driver()
        _check(
            driver.cuMemcpyDtoDAsync(dst_ptr, src_ptr, nbytes, driver.CUstream(self.stream_handle)),
            "cuMemcpyDtoDAsync",
        )

    def _copy_h2d(self, dst_ptr: int, host: np.ndarray) -> None:
        if host.nbytes == 0:
            return
        driver = _driver()
        # Pageable source: the driver stages it before returning, so `host`
        # may be freed as soon as this call is back.
        _check(
            driver.cuMemcpyHtoDAsync(
                dst_ptr,
                host.ctypes.data,
                host.nbytes,
                driver.CUstream(self.stream_handle),
            ),
            "cuMemcpyHtoDAsync",
        )

    def synchronize(self) -> None:
        self.stream.sync()

    # -- foreign buffers ----------------------------------------------------

    def wrap(self, obj: Any) -> DeviceArray:
        """A view of a foreign device array without a copy.

        Accepts torch CUDA tensors (all float dtypes, bfloat16 too), anything
        with ``__cuda_array_interface__`` (CuPy, Numba), and anything with
        ``__dlpack__`` through cuda.core's StridedMemoryView.
        """
        if isinstance(obj, DeviceArray):
            return obj
        if type(obj).__module__.startswith("torch"):
            return self._wrap_torch(obj)
        cai = None
        if hasattr(obj, "__cuda_array_interface__"):
            try:
                cai = obj.__cuda_array_interface__
            except (TypeError, AttributeError, RuntimeError):
                cai = None  # e.g. a dtype the producer cannot describe: try DLPack
        if cai is not None:
            return self._wrap_cai(obj, cai)
        if hasattr(obj, "__dlpack__"):
            return self._wrap_dlpack(obj)
        raise TypeError(f"{type(obj).__name__} exposes neither __cuda_array_interface__ nor __dlpack__")

    def _wrap_torch(self, t: Any) -> DeviceArray:
        if not t.is_cuda:
            raise ValueError("the torch tensor is not on a CUDA device")
        name = str(t.dtype).removeprefix("torch.")
        dtype = BFLOAT16 if name == "bfloat16" else np.dtype(name)
        return DeviceArray(
            t.data_ptr(),
            tuple(t.shape),
            tuple(t.stride()),
            dtype,
            owner=t,
            device_id=t.device.index or 0,
        )

    def _wrap_cai(self, obj: Any, cai: dict[str, Any]) -> DeviceArray:
        dtype = dtype_from_typestr(cai["typestr"])
        shape = tuple(cai["shape"])
        byte_strides = cai.get("strides")
        if byte_strides is None:
            strides = None
        else:
            if any(s % dtype.itemsize for s in byte_strides):
                raise ValueError(f"strides {byte_strides} are not whole elements")
            strides = tuple(s // dtype.itemsize for s in byte_strides)
        stream = cai.get("stream")
        if stream not in (None, 0) and cai.get("version", 0) >= 3:
            # The producer asks consumers to order after its stream: make ours wait.
            self.wait_for(int(stream))
        return DeviceArray(cai["data"][0], shape, strides, dtype, owner=obj, device_id=self.device_id)

    def _wrap_dlpack(self, obj: Any) -> DeviceArray:
        try:
            from cuda.core.utils import StridedMemoryView
        except ImportError:
            from cuda.core.experimental.utils import StridedMemoryView
        if hasattr(StridedMemoryView, "from_dlpack"):
            view = StridedMemoryView.from_dlpack(obj, stream_ptr=self.stream_handle)
        else:
            view = StridedMemoryView(obj, stream_ptr=self.stream_handle)
        if not view.is_device_accessible:
            raise ValueError("the DLPack array is not on a CUDA device")
        strides = None if view.strides is None else tuple(view.strides)
        return DeviceArray(
            view.ptr,
            tuple(view.shape),
            strides,
            view.dtype,
            owner=(obj, view),
            device_id=view.device_id,
        )

    def wait_for(self, foreign: int) -> None:
        """Our stream waits (on the device, not the host) for what is enqueued on ``foreign`` so far."""
        self.order(foreign, self.stream_handle)

    def release_to(self, foreign: int) -> None:
        """``foreign`` waits (on the device) for what is enqueued on our stream so far: no host wait."""
        self.order(self.stream_handle, foreign)

    def order(self, first: int, then: int) -> None:
        """``then`` waits (on the device) for what is enqueued on ``first`` so far."""
        driver = _driver()
        if self._order_event is None:
            flags = driver.CUevent_flags.CU_EVENT_DISABLE_TIMING
            self._order_event = _check(driver.cuEventCreate(flags), "cuEventCreate")
        # A wait takes the event as last recorded, so re-recording one event is safe.
        _check(driver.cuEventRecord(self._order_event, driver.CUstream(first)), "cuEventRecord")
        _check(driver.cuStreamWaitEvent(driver.CUstream(then), self._order_event, 0), "cuStreamWaitEvent")


# ---------------------------------------------------------------------------
# CUDA graphs


class CudaGraph:
    """A recorded sequence of launches on a context's stream, replayed with one cuGraphLaunch.

    Recording captures whatever the callables enqueue on the stream (relaxed
    capture mode: cuTile may query the driver while launching). The
    recording bakes in every kernel argument, device pointers included: it
    is valid only while those buffers stay where they were.
    """

    def __init__(self, context: GpuContext, graph: Any, exec_graph: Any) -> None:
        self._context = context
        self._graph = graph
        self._exec = exec_graph

    @classmethod
    def record(cls, context: GpuContext, launches: Sequence[Any]) -> CudaGraph:
        driver = _driver()
        stream = driver.CUstream(context.stream_handle)
        mode = driver.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED
        _check(driver.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
        try:
            for launch in launches:
                launch()
        finally:
            graph = _check(driver.cuStreamEndCapture(stream), "cuStreamEndCapture")
        if hasattr(driver, "cuGraphInstantiateWithFlags"):
            exec_graph = _check(driver.cuGraphInstantiateWithFlags(graph, 0), "cuGraphInstantiateWithFlags")
        else:
            exec_graph = _check(driver.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
        return cls(context, graph, exec_graph)

    def replay(self, stream: int | None = None) -> None:
        """Enqueue the recording on ``stream`` (a raw CUstream; the context's by default)."""
        driver = _driver()
        handle = self._context.stream_handle if stream is None else stream
        _check(driver.cuGraphLaunch(self._exec, driver.CUstream(handle)), "cuGraphLaunch")

    def __del__(self) -> None:
        try:
            driver = _driver()
            driver.cuGraphExecDestroy(self._exec)
            driver.cuGraphDestroy(self._graph)
        except Exception:  # interpreter shutdown: the driver may be gone already
            pass
