"""Run the GPU backend on the CPU: cuTile plans over NumPy buffers through the emulator.

``emulated_executor()`` is a real ``Executor("gpu")`` whose memory is host
memory presented as a GPU device carrying an ``EmulatedGpu`` context, with
the cuTile builders made available: prepare (keys, fusion claims, builder
choice, memory plan) and execute run unchanged, and the generated kernels
run through ``sigdnn.plan_builders.cutile.emulator``.
"""

from __future__ import annotations

import pytest

from sigdnn.executor import Executor
from sigdnn.executor.host import HostMemory
from sigdnn.plan_builders.cutile import pointwise
from sigdnn.plan_builders.cutile.backend import EmulatedGpu
from sigdnn.runtime.device import Device


class EmulatedGpuMemory(HostMemory):
    def __init__(self) -> None:
        self.context = EmulatedGpu()
        self.device = Device("gpu", self.context)


def make_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """The cuTile builders report themselves available (their kernels will be emulated)."""
    monkeypatch.setattr(pointwise, "unavailable_reason", lambda: None)
    from sigdnn.plan_builders.cutile import fusion

    monkeypatch.setattr(fusion, "unavailable_reason", lambda: None)


def emulated_executor(**kwargs) -> Executor:
    ex = Executor("gpu", **kwargs)
    ex._memory = EmulatedGpuMemory()
    return ex
