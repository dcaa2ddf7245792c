"""Stream order with torch tensors, on the CPU: which waits the executor enqueues, and when it waits on the host.

torch's current stream is stubbed (a raw handle torch would give) and the
context records its calls, so the order rules run without a device: before
any step our stream waits for torch's; after a run whose outputs stay on
the device torch's stream waits for ours (no host wait); a host output, a
copy back or a fresh output makes the run end with a host synchronize
instead. tests/gpu/test_gpu_executor.py checks the same on the H200 with a
spinning torch stream.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from emulated import HostGpuContext, make_available
from test_bound_torch_views import FakeCudaTensor

import sigdnn
from sigdnn.executor import Executor
from sigdnn.executor.gpu_memory import GpuMemory, _torch_stream

TORCH_STREAM = 0x7A11


class RecordingContext(HostGpuContext):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple] = []

    def wait_for(self, foreign: int) -> None:
        self.calls.append(("wait_for", foreign))

    def release_to(self, foreign: int) -> None:
        self.calls.append(("release_to", foreign))

    def synchronize(self) -> None:
        self.calls.append(("synchronize",))


@pytest.fixture
def context(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: TORCH_STREAM, raising=False)
    return RecordingContext()


def executor(context: RecordingContext, **kw) -> Executor:
    ex = Executor("gpu", **kw)
    ex._memory = GpuMemory(context=context)
    return ex


def graph() -> sigdnn.Graph:
    g = sigdnn.Graph("g", io_dtype="float32", compute_dtype="float32")
    x, b = g.tensor("x", dims=(3, 5)), g.tensor("b", dims=(3, 5))
    g.pointwise("relu_fwd", g.pointwise("add", x, b)).set_output(True).set_name("y")
    return g


def fake(value: float) -> FakeCudaTensor:
    return FakeCudaTensor(np.full((3, 5), value, np.float32))


def test_torch_stream_is_read_from_the_first_torch_cuda_tensor(context):
    host_tensor = FakeCudaTensor(np.zeros(2, np.float32))
    host_tensor.is_cuda = False
    assert _torch_stream([np.zeros(2), host_tensor]) is None
    assert _torch_stream([np.zeros(2), host_tensor, fake(1.0)]) == TORCH_STREAM
    assert _torch_stream([]) is None
    not_a_tensor = type("Size", (), {"__module__": "torch.other"})()  # torch's, but no device to read
    assert _torch_stream([not_a_tensor]) is None


def test_bound_run_on_device_outputs_orders_both_ways_without_a_host_wait(context):
    ex = executor(context)
    plan = ex.prepare(graph())
    y = fake(0.0)
    ex.execute(plan, {"x": fake(-2.0), "b": fake(1.5), "y": y}, to_host=False)
    assert context.calls == [("wait_for", TORCH_STREAM), ("release_to", TORCH_STREAM)]
    np.testing.assert_array_equal(y.array, np.zeros((3, 5), np.float32))


@pytest.mark.parametrize("case", ["to_host", "fresh output", "host output"])
def test_bound_run_that_hands_results_to_the_host_synchronizes_instead(context, case):
    ex = executor(context)
    plan = ex.prepare(graph())
    pack = {"x": fake(2.0), "b": fake(1.5)}
    if case == "host output":
        pack["y"] = np.zeros((3, 5), np.float32)
    elif case == "to_host":
        pack["y"] = fake(0.0)
    got = ex.execute(plan, pack, to_host=case == "to_host")
    assert context.calls[0] == ("wait_for", TORCH_STREAM)
    assert ("release_to", TORCH_STREAM) not in context.calls
    assert context.calls[-1] == ("synchronize",)
    y = got["y"] if isinstance(got["y"], np.ndarray) else context.to_host(got["y"])  # a fresh device output
    np.testing.assert_array_equal(y, np.full((3, 5), 3.5, np.float32))


def test_numpy_callers_never_touch_torch_s_stream(context):
    ex = executor(context)
    plan = ex.prepare(graph())
    ex.execute(plan, {"x": np.ones((3, 5), np.float32), "b": np.ones((3, 5), np.float32)})
    assert all(call[0] == "synchronize" for call in context.calls)


def test_capturing_path_waits_for_torch_once_before_its_first_step(context):
    ex = executor(context, fusion=False)
    plan = ex.prepare(graph())
    captured: dict = {}
    got = ex.execute(plan, {"x": fake(2.0), "b": fake(-3.0), "y": fake(9.0)}, capture=captured)
    waits = [c for c in context.calls if c[0] == "wait_for"]
    assert waits == [("wait_for", TORCH_STREAM)] and context.calls[0] == waits[0]
    np.testing.assert_array_equal(np.asarray(got["y"]), np.zeros((3, 5), np.float32))
    assert len(captured) == 2
