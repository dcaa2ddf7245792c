"""Stream order with torch tensors, on the CPU: where the executor enqueues, which waits it adds, when it waits.

torch's current stream is stubbed (a raw handle torch would give) and the
context records its ordering calls and the stream of every launch, so the
rules run without a device: with torch tensors the steps go on torch's
stream (ordered after torch's work and before torch's next op as one more
op would be); the binding's memory is handed between streams with one
device-side wait only when the stream that uses it changes; a host output,
a copy back or a fresh output ends the run with a host synchronize instead.
tests/gpu/test_gpu_executor.py checks the same on the H200 with a spinning
torch stream.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from emulated import HostGpuContext, make_available
from test_bound_torch_views import FakeCudaTensor

import sigdnn
from sigdnn.executor import Executor
from sigdnn.executor.gpu_buffers import current_torch_stream
from sigdnn.executor.gpu_memory import GpuMemory

TORCH_STREAM = 0x7A11
OURS = 0x0C7A


class RecordingContext(HostGpuContext):
    def __init__(self) -> None:
        super().__init__()
        self.stream_handle = OURS
        self.calls: list[tuple] = []
        emulated = self.kernel_backend

        class Backend(type(emulated)):
            @staticmethod
            def launch(stream, grid, kernel, args):
                self.calls.append(("launch", stream))
                emulated.launch(stream, grid, kernel, args)

        self.kernel_backend = Backend()

    def wait_for(self, foreign: int) -> None:
        self.calls.append(("wait_for", foreign))

    def release_to(self, foreign: int) -> None:
        self.calls.append(("release_to", foreign))

    def order(self, first: int, then: int) -> None:
        self.calls.append(("order", first, then))

    def synchronize(self) -> None:
        self.calls.append(("synchronize",))

    def _copy_h2d(self, dst_ptr: int, host: np.ndarray) -> None:
        self.calls.append(("upload",))
        super()._copy_h2d(dst_ptr, host)

    def allocate(self, nbytes: int):
        self.calls.append(("allocate",))
        return super().allocate(nbytes)


@pytest.fixture
def context(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: TORCH_STREAM, raising=False)
    return RecordingContext()


def streams(calls: list[tuple]) -> list[tuple]:
    """The calls that order streams, launch or wait on the host (uploads and allocations left out)."""
    return [c for c in calls if c[0] not in ("upload", "allocate")]


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
    assert current_torch_stream([np.zeros(2), host_tensor]) is None
    assert current_torch_stream([np.zeros(2), host_tensor, fake(1.0)]) == TORCH_STREAM
    assert current_torch_stream([]) is None
    not_a_tensor = type("Size", (), {"__module__": "torch.other"})()  # torch's, but no device to read
    assert current_torch_stream([not_a_tensor]) is None


def test_bound_run_on_device_outputs_enqueues_on_torch_s_stream_without_a_wait(context):
    ex = executor(context)
    plan = ex.prepare(graph())
    y = fake(0.0)
    got = ex.execute(plan, {"x": fake(-2.0), "b": fake(1.5), "y": y}, to_host=False)
    assert got["y"] is y  # the caller's own tensor
    # the binding's memory was new on our stream: torch's waits for that once, then every launch is torch's
    launches = [("launch", TORCH_STREAM)] * (len(streams(context.calls)) - 1)
    assert streams(context.calls) == [("release_to", TORCH_STREAM), *launches] and launches
    np.testing.assert_array_equal(y.array, np.zeros((3, 5), np.float32))
    context.calls.clear()
    ex.execute(plan, {"x": fake(2.0), "b": fake(1.5), "y": y}, to_host=False)
    assert context.calls == launches  # no ordering call, no allocation, no upload
    np.testing.assert_array_equal(y.array, np.full((3, 5), 3.5, np.float32))


def test_a_change_of_torch_stream_waits_for_the_last_one(context, monkeypatch):
    ex = executor(context)
    plan = ex.prepare(graph())
    pack = {"x": fake(1.0), "b": fake(1.0), "y": fake(0.0)}
    ex.execute(plan, pack, to_host=False)
    monkeypatch.setattr(torch._C, "_cuda_getCurrentRawStream", lambda index: TORCH_STREAM + 1, raising=False)
    context.calls.clear()
    ex.execute(plan, pack, to_host=False)
    assert context.calls[0] == ("order", TORCH_STREAM, TORCH_STREAM + 1)
    assert all(c == ("launch", TORCH_STREAM + 1) for c in context.calls[1:])


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
    launches = [i for i, c in enumerate(context.calls) if c[0] == "launch"]
    assert launches and all(context.calls[i] == ("launch", TORCH_STREAM) for i in launches)
    # before the launches torch's stream waits for our stream's work; after them ours waits for torch's, then the host
    assert ("release_to", TORCH_STREAM) in context.calls[: launches[0]]
    assert context.calls[launches[-1] + 1 :] == [("wait_for", TORCH_STREAM), ("synchronize",)]
    y = got["y"] if isinstance(got["y"], np.ndarray) else context.to_host(got["y"])  # a fresh device output
    np.testing.assert_array_equal(y, np.full((3, 5), 3.5, np.float32))


def test_numpy_callers_never_touch_torch_s_stream(context):
    ex = executor(context)
    plan = ex.prepare(graph())
    ex.execute(plan, {"x": np.ones((3, 5), np.float32), "b": np.ones((3, 5), np.float32)})
    assert streams(context.calls) and all(c in (("launch", OURS), ("synchronize",)) for c in streams(context.calls))


def test_a_numpy_run_after_a_torch_run_waits_for_torch_s_stream_first(context):
    ex = executor(context)
    plan = ex.prepare(graph())
    ex.execute(plan, {"x": fake(1.0), "b": fake(1.0), "y": fake(0.0)}, to_host=False)
    context.calls.clear()
    ex.execute(plan, {"x": np.ones((3, 5), np.float32), "b": np.ones((3, 5), np.float32)})
    # the staging buffers are allocated (nothing enqueued), then ours waits for torch's before the first upload
    assert context.calls.index(("wait_for", TORCH_STREAM)) < context.calls.index(("upload",))
    assert [c for c in context.calls if c[0] == "launch"] and ("launch", TORCH_STREAM) not in context.calls


def test_a_fresh_output_after_a_torch_run_is_allocated_after_torch_s_stream(context):
    """A fresh output comes from our stream's ordered allocator: ours first waits for the binding's last use."""
    ex = executor(context)
    plan = ex.prepare(graph())
    ex.execute(plan, {"x": fake(1.0), "b": fake(1.0), "y": fake(0.0)}, to_host=False)
    context.calls.clear()
    ex.execute(plan, {"x": fake(1.0), "b": fake(1.0)}, to_host=False)
    assert context.calls[:2] == [("wait_for", TORCH_STREAM), ("allocate",)]


def test_a_changed_scalar_after_a_torch_run_is_uploaded_after_torch_s_stream(context):
    g = sigdnn.Graph("g", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(3, 5))
    g.pointwise("mul", x, g.scalar("s", 0.5)).set_output(True).set_name("y")
    ex = executor(context)
    plan = ex.prepare(g)
    y = fake(0.0)
    ex.execute(plan, {"x": fake(4.0), "y": y}, to_host=False)
    context.calls.clear()
    ex.execute(plan, {"x": fake(4.0), "s": np.float32(0.25), "y": y}, to_host=False)
    assert context.calls[:2] == [("wait_for", TORCH_STREAM), ("upload",)]
    np.testing.assert_array_equal(y.array, np.full((3, 5), 1.0, np.float32))


def test_capturing_path_waits_for_torch_once_before_its_first_step(context):
    ex = executor(context, fusion=False)
    plan = ex.prepare(graph())
    captured: dict = {}
    got = ex.execute(plan, {"x": fake(2.0), "b": fake(-3.0), "y": fake(9.0)}, capture=captured)
    waits = [c for c in context.calls if c[0] == "wait_for"]
    assert waits == [("wait_for", TORCH_STREAM)] and context.calls[0] == waits[0]
    np.testing.assert_array_equal(np.asarray(got["y"]), np.zeros((3, 5), np.float32))
    assert len(captured) == 2


def test_cuda_graphs_are_captured_on_our_stream_and_replayed_on_torch_s(context, monkeypatch):
    """torch's current stream may be the legacy default stream, which cannot capture: record on ours."""
    from sigdnn.runtime import cuda

    made = []

    class Recording:
        def __init__(self, launches):
            self.launches, self.streams = list(launches), []

        @classmethod
        def record(cls, ctx, launches):
            made.append(cls(launches))
            return made[-1]

        def replay(self, stream=None):
            self.streams.append(stream)

    monkeypatch.setattr(cuda, "CudaGraph", Recording)
    ex = executor(context, cuda_graphs=True)
    plan = ex.prepare(graph())
    pack = {"x": fake(1.0), "b": fake(1.0), "y": fake(0.0)}
    for _ in range(3):
        ex.execute(plan, pack, to_host=False)
    assert len(made) == 1 and made[0].streams == [TORCH_STREAM, TORCH_STREAM]
    context.calls.clear()
    for launch in made[0].launches:  # what was captured enqueues on our stream
        launch()
    assert context.calls and all(c == ("launch", OURS) for c in context.calls)
    context.calls.clear()
    ex.execute(plan, {"x": fake(1.0), "b": fake(1.0), "y": fake(0.0)}, to_host=False)  # new tensors: launched
    assert context.calls and all(c == ("launch", TORCH_STREAM) for c in context.calls)


def test_a_graph_constant_is_uploaded_after_torch_s_stream_and_then_held(context):
    """A constant left out after a torch run that overrode it: uploaded once ours waited for torch's stream, then
    kept (no upload on the next run)."""
    g = sigdnn.Graph("g", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(3, 5))
    g.pointwise("mul", x, g.constant("w", np.full((3, 5), 2.0, np.float32))).set_output(True).set_name("y")
    ex = executor(context)
    plan = ex.prepare(g)
    y = fake(0.0)
    ex.execute(plan, {"x": fake(4.0), "w": fake(3.0), "y": y}, to_host=False)
    np.testing.assert_array_equal(y.array, np.full((3, 5), 12.0, np.float32))
    context.calls.clear()
    ex.execute(plan, {"x": fake(4.0), "y": y}, to_host=False)
    assert context.calls.index(("wait_for", TORCH_STREAM)) < context.calls.index(("upload",))
    np.testing.assert_array_equal(y.array, np.full((3, 5), 8.0, np.float32))
    context.calls.clear()
    ex.execute(plan, {"x": fake(4.0), "y": y}, to_host=False)
    assert ("upload",) not in context.calls


def test_after_a_stream_change_a_moved_input_rebinds_only_its_own_step(context):
    """The first run moves every launch to torch's stream (all bound again, their addresses noted); a second
    run with x elsewhere binds again the step that reads x, not the one that writes the unmoved y."""
    ex = executor(context, fusion=False)
    plan = ex.prepare(graph())
    y = fake(0.0)
    ex.execute(plan, {"x": fake(-2.0), "b": fake(1.5), "y": y}, to_host=False)
    bound = ex.memory.bound(plan, False)
    before = list(bound._launches)
    ex.execute(plan, {"x": fake(2.0), "b": fake(1.5), "y": y}, to_host=False)
    assert len(plan.steps) == 2  # add (x, b), then relu into y
    assert [old is new for old, new in zip(before, bound._launches)] == [False, True]
    np.testing.assert_array_equal(y.array, np.full((3, 5), 3.5, np.float32))
