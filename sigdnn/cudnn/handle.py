"""Handles: which sigdnn backend a pygraph runs on, and the stream it runs on.

cuDNN's handle carries the device and the stream; here it also picks the
backend. ``create_handle()`` gives a GPU handle (the GPU builders) when this
machine can run them and otherwise falls back to the CPU reference with a
RuntimeWarning that says why, so code written for cuDNN runs unchanged on a
machine without a GPU. ``create_handle(device="cpu")`` (a sigdnn extension)
asks for the reference outright; ``device="gpu"`` refuses to fall back.
"""

from __future__ import annotations

import warnings
from typing import Any

import attrs

from sigdnn.errors import ExecutionError, UsageError

DEVICES = ("gpu", "cpu")


@attrs.define(eq=False)
class Handle:
    """A backend ("gpu" or "cpu", i.e. sigdnn's "gpu" or "reference" executor) and a stream (GPU only)."""

    device: str
    stream: Any = None
    fell_back: str | None = None  # why a handle asked for without a device runs on the CPU
    executor: Any = None  # a configured sigdnn Executor of this backend (None: the shared one)

    @property
    def backend(self) -> str:
        return "gpu" if self.device == "gpu" else "reference"


def _gpu_reason() -> str | None:
    from sigdnn.runtime.cuda import gpu_unavailable_reason

    return gpu_unavailable_reason()


def create_handle(device: str | None = None, executor: Any = None) -> Handle:
    """A handle on the GPU, or (``device="cpu"``, or no GPU here and no device asked for) the CPU reference.

    ``executor`` (a sigdnn extension) runs this handle's graphs on a configured
    Executor (its registry, router, autotune, pins); its backend sets the device.
    """
    if executor is not None:
        device = device or ("gpu" if executor.backend == "gpu" else "cpu")
        if (device == "gpu") != (executor.backend == "gpu"):
            raise UsageError(f"create_handle(device={device!r}) with an executor of backend {executor.backend!r}")
    if device is not None and device not in DEVICES:
        raise UsageError(f"create_handle(device={device!r}): expected one of {', '.join(DEVICES)}")
    if device == "cpu":
        return Handle("cpu", executor=executor)
    reason = _gpu_reason()
    if reason is None:
        return Handle("gpu", executor=executor)
    if device == "gpu":
        raise ExecutionError(f"create_handle(device='gpu'): no GPU backend here: {reason}")
    warnings.warn(f"sigdnn.cudnn.create_handle(): no GPU backend ({reason}); running on the CPU reference",
                  RuntimeWarning, stacklevel=2)  # fmt: skip
    return Handle("cpu", fell_back=reason)


def destroy_handle(handle: Handle) -> None:
    """Nothing to release: sigdnn's executors own their memory."""
    if not isinstance(handle, Handle):
        raise UsageError(f"destroy_handle() takes a handle from create_handle(), not {type(handle).__name__}")


def set_stream(handle: Handle, stream: Any) -> None:
    """The stream GPU work is enqueued on (a raw CUstream handle or a torch stream); the CPU has none."""
    if not isinstance(handle, Handle):
        raise UsageError(f"set_stream() takes a handle from create_handle(), not {type(handle).__name__}")
    if handle.device == "cpu":
        raise NotImplementedError("set_stream(): a CPU handle (the reference backend) has no stream")
    handle.stream = stream


def get_stream(handle: Handle) -> Any:
    if not isinstance(handle, Handle):
        raise UsageError(f"get_stream() takes a handle from create_handle(), not {type(handle).__name__}")
    return handle.stream
