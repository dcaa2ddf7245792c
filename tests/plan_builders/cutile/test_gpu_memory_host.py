"""gpu_memory's host-side logic on a host-backed context (no GPU): what it keeps, records and refuses.

GpuMemory, GpuRun and BoundPlan decide on the host what the device does:
which bindings are kept, when launches are recorded into a CUDA graph and
replayed, which caller buffers are copied in and out, which are refused. With
HostGpuContext those decisions run unchanged over NumPy memory. CUDA graph
capture itself needs a GPU: here ``CudaGraph`` is replaced by a recorder that
keeps the launches and replays them, so the tests see when BoundPlan records,
replays or launches directly (tests/gpu/test_gpu_executor.py runs the real one).
"""

from __future__ import annotations

import weakref
from types import SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest
from emulated import HostGpuContext, host_gpu_executor, make_available

import sigdnn
from sigdnn.errors import VariantPackError
from sigdnn.executor import gpu_memory
from sigdnn.executor.gpu_memory import GpuMemory
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.runtime import cuda
from sigdnn.runtime.device_array import DeviceArray

# What the module promises (stated here, not read from it): bindings kept per executor, recordings per plan.
BOUND_PLANS = 64
GRAPHS_PER_PLAN = 4


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


class CountingContext(HostGpuContext):
    """Counts host-to-device copies and synchronizations."""

    def __init__(self) -> None:
        super().__init__()
        self.uploads = 0
        self.syncs = 0

    def _copy_h2d(self, dst_ptr: int, host: np.ndarray) -> None:
        self.uploads += 1
        super()._copy_h2d(dst_ptr, host)

    def synchronize(self) -> None:
        self.syncs += 1


class Block:
    """A device allocation: its address and size (weakly referenceable, unlike SimpleNamespace)."""

    def __init__(self, buf: np.ndarray) -> None:
        self.handle, self.size = buf.ctypes.data, buf.nbytes


class PoolingContext(CountingContext):
    """Hands a freed block of a size to the next allocation of that size, as caching allocators do."""

    def __init__(self) -> None:
        super().__init__()
        self._free: dict[int, list[np.ndarray]] = {}

    def allocate(self, nbytes: int) -> Any:
        self.allocations += 1
        n = max(int(nbytes), 1)
        pool = self._free.setdefault(n, [])
        buf = pool.pop() if pool else np.zeros(n, np.uint8)
        block = Block(buf)
        weakref.finalize(block, pool.append, buf)  # back to the pool when no view holds the block
        return block


def executor_on(context: HostGpuContext, **kwargs: Any) -> sigdnn.Executor:
    ex = sigdnn.Executor("gpu", **kwargs)
    ex._memory = GpuMemory(context=context)
    return ex


def small() -> sigdnn.Graph:
    """y = relu((x + b) * s): x packed, b broadcast along rows, s a graph scalar."""
    g = sigdnn.Graph("small", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(4, 6))
    b = g.tensor("b", dims=(1, 6))
    s = g.scalar("s", 0.5)
    g.pointwise("relu_fwd", g.pointwise("mul", g.pointwise("add", x, b), s)).set_output(True).set_name("y")
    return g


def want(data: dict[str, np.ndarray], s: float = 0.5) -> np.ndarray:
    """y for ints() inputs: small integers, so float32 computes it exactly."""
    return np.maximum((data["x"] + data["b"]) * np.float32(s), 0)


def ints(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.integers(-8, 9, (4, 6)).astype(np.float32),
        "b": rng.integers(-8, 9, (1, 6)).astype(np.float32),
    }


# -- GpuMemory.bound ----------------------------------------------------------------------------


def test_bindings_are_kept_per_plan_and_the_least_recently_used_dropped(monkeypatch):
    made: list[Any] = []

    def fake(plan: Any, memory: Any, cuda_graphs: bool) -> Any:
        made.append(SimpleNamespace(plan=plan, cuda_graphs=cuda_graphs))
        return made[-1]

    monkeypatch.setattr(gpu_memory, "BoundPlan", fake)
    memory = GpuMemory(context=HostGpuContext())
    assert memory.device.kind == "gpu" and memory.device.context is memory.context
    plans = [SimpleNamespace(digest=f"plan {i}") for i in range(BOUND_PLANS + 1)]
    first = memory.bound(plans[0], False)
    assert memory.bound(plans[0], False) is first and len(made) == 1
    graphs = memory.bound(plans[0], True)  # another recording setting: bound anew
    assert graphs is not first and graphs.cuda_graphs and memory.bound(plans[0], True) is graphs
    other = SimpleNamespace(digest="plan 0")  # the same digest from another plan object: bound anew
    assert memory.bound(other, True).plan is other
    held = [memory.bound(p, False) for p in plans[:BOUND_PLANS]]
    assert all(memory.bound(p, False) is h for p, h in zip(plans, held))  # all 64 still held
    count = len(made)
    memory.bound(plans[0], False)  # most recent now: plans[1] is the least recently used
    memory.bound(plans[BOUND_PLANS], False)
    assert len(made) == count + 1
    assert memory.bound(plans[0], False) is held[0] and memory.bound(plans[2], False) is held[2]
    assert memory.bound(plans[1], False) is not held[1]  # dropped, bound again


def test_the_default_context_is_the_gpu_one(monkeypatch):
    monkeypatch.setattr(cuda, "GpuContext", lambda device_id: SimpleNamespace(device_id=device_id))
    assert GpuMemory(3).context.device_id == 3
    assert GpuMemory().context.device_id == 0


# -- CUDA graphs (recording replaced by a launch list) --------------------------------------------


class Recorder:
    """Stands for CudaGraph: keeps the launches as recorded, runs them on replay."""

    made: list[Recorder] = []

    def __init__(self, launches: list[Any]) -> None:
        self.launches = launches
        self.replays = 0
        self.streams: list[int | None] = []  # where each replay was enqueued

    @classmethod
    def record(cls, context: Any, launches: list[Any]) -> Recorder:
        cls.made.append(cls(list(launches)))
        return cls.made[-1]

    def replay(self, stream: int | None = None) -> None:
        self.replays += 1
        self.streams.append(stream)
        for launch in self.launches:
            launch()


@pytest.fixture
def recorder(monkeypatch):
    monkeypatch.setattr(cuda, "CudaGraph", Recorder)
    monkeypatch.setattr(Recorder, "made", [])
    return Recorder


def test_launches_are_recorded_on_the_second_run_at_the_same_addresses_then_replayed(recorder):
    g = small()
    ex = host_gpu_executor(cuda_graphs=True)
    plan = ex.prepare(g)
    y = np.empty((4, 6), np.float32)
    for run, seed in enumerate((1, 2, 3, 4)):
        data = ints(seed)  # host arrays: staged at fixed device addresses, so every run has the same ones
        got = ex.execute(plan, {**data, "y": y})["y"]
        assert got is y and np.array_equal(y, want(data)), run
        assert len(recorder.made) == (0 if run == 0 else 1)
        assert [r.replays for r in recorder.made] == ([] if run == 0 else [run])
    bound = ex.memory.bound(plan, True)
    assert bound.recordings == 1
    data = ints(5)
    assert np.array_equal(ex.execute(plan, data)["y"], want(data))  # y not given: a fresh buffer, never replayed
    assert np.array_equal(ex.execute(plan, data)["y"], want(data))
    assert len(recorder.made) == 1 and recorder.made[0].replays == 3


def test_recordings_per_plan_are_capped_least_recently_used_dropped(recorder):
    g = small()
    ex = host_gpu_executor(cuda_graphs=True)
    plan = ex.prepare(g)
    ctx = ex.memory.context
    data = ints(6)
    b = data["b"]
    xs = [ctx.to_device(data["x"] + k) for k in range(GRAPHS_PER_PLAN + 1)]  # one address each
    y = np.empty((4, 6), np.float32)
    for k, x in enumerate(xs):
        for _ in range(2):
            ex.execute(plan, {"x": x, "b": b, "y": y})
            assert np.array_equal(y, want({"x": data["x"] + k, "b": b}))
    bound = ex.memory.bound(plan, True)
    assert len(recorder.made) == GRAPHS_PER_PLAN + 1 and bound.recordings == GRAPHS_PER_PLAN
    ex.execute(plan, {"x": xs[-1], "b": b, "y": y})  # kept: replayed
    assert len(recorder.made) == GRAPHS_PER_PLAN + 1 and recorder.made[-1].replays == 2
    ex.execute(plan, {"x": xs[1], "b": b, "y": y})  # kept, and now the most recent
    assert recorder.made[1].replays == 2
    ex.execute(plan, {"x": xs[0], "b": b, "y": y})  # dropped, seen before: recorded again
    assert len(recorder.made) == GRAPHS_PER_PLAN + 2 and np.array_equal(y, want({"x": data["x"], "b": b}))
    ex.execute(plan, {"x": xs[1], "b": b, "y": y})  # xs[2] was dropped for xs[0], not xs[1]
    assert recorder.made[1].replays == 3 and len(recorder.made) == GRAPHS_PER_PLAN + 2


def test_a_plan_with_a_step_that_cannot_bind_is_never_recorded(recorder, monkeypatch):
    """matmul falls back to the reference (no bind: it synchronizes), relu is a cuTile step: not recordable."""
    g = sigdnn.Graph("mm", io_dtype="float32", compute_dtype="float32")
    x, w = g.tensor("x", dims=(2, 3)), g.tensor("w", dims=(3, 2))
    g.pointwise("relu_fwd", g.matmul(x, w, name="mm")).set_output(True).set_name("y")
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: "left out of this test")
    ex = host_gpu_executor(cuda_graphs=True, fallback="reference", fusion=False)
    plan = ex.prepare(g)
    assert [hasattr(s.plan, "bind") for s in plan.steps] == [False, True]
    xs, ws = np.arange(-3, 3, dtype=np.float32).reshape(2, 3), np.ones((3, 2), np.float32)
    y = np.empty((2, 2), np.float32)
    for _ in range(3):
        ex.execute(plan, {"x": xs, "w": ws, "y": y})
        assert np.array_equal(y, np.maximum(xs @ ws, 0))
    assert recorder.made == []


def test_runs_with_a_fresh_output_are_never_recorded_even_at_addresses_seen_before(recorder):
    ctx = PoolingContext()
    ex = executor_on(ctx, cuda_graphs=True)
    plan = ex.prepare(small())
    data = ints(15)
    dev = {"x": ctx.to_device(data["x"]), "b": ctx.to_device(data["b"])}
    ptrs = []
    for _ in range(4):
        out = ex.execute(plan, dev, to_host=False)["y"]
        ptrs.append(out.ptr)
        assert np.array_equal(ctx.to_host(out), want(data))
        del out
    assert len(set(ptrs)) < len(ptrs)  # the pool handed out an address again
    assert recorder.made == []


# -- BoundPlan.run: scalars, host and device buffers ---------------------------------------------


def test_scalars_are_staged_and_overridden():
    g = small()
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    data = ints(7)
    assert np.array_equal(ex.execute(plan, data)["y"], want(data))  # the graph's 0.5
    assert np.array_equal(ex.execute(plan, {**data, "s": -2.0})["y"], want(data, -2.0))
    assert np.array_equal(ex.execute(plan, {**data, "s": np.float32(3)})["y"], want(data, 3.0))
    assert np.array_equal(ex.execute(plan, data)["y"], want(data))  # back to the graph's value


def test_device_outputs_stay_on_the_device_unless_asked():
    g = small()
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    ctx = ex.memory.context
    data = ints(8)
    x = ctx.to_device(data["x"])
    y_dev = ctx.to_device(np.zeros((4, 6), np.float32))
    out = ex.execute(plan, {"x": x, "b": data["b"], "y": y_dev}, to_host=False)["y"]
    assert out is y_dev and np.array_equal(ctx.to_host(y_dev), want(data))
    host = ex.execute(plan, {"x": x, "b": data["b"], "y": y_dev})["y"]
    assert isinstance(host, np.ndarray) and np.array_equal(host, want(data))
    fresh = ex.execute(plan, {"x": x, "b": data["b"]}, to_host=False)["y"]
    assert isinstance(fresh, DeviceArray) and fresh.ptr != y_dev.ptr
    assert np.array_equal(ctx.to_host(fresh), want(data))
    again = ex.execute(plan, {"x": x, "b": data["b"]}, to_host=False)["y"]
    assert again.ptr != fresh.ptr and np.array_equal(ctx.to_host(fresh), want(data))  # a new buffer each run


def test_an_input_array_is_never_written():
    g = small()
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    data = ints(9)
    x = data["x"].copy()
    x.flags.writeable = False  # read-only inputs are fine: they are only copied in
    assert np.array_equal(ex.execute(plan, {**data, "x": x})["y"], want(data))
    assert np.array_equal(x, data["x"])


def bad_packs(ctx: Any, data: dict[str, np.ndarray]) -> list[tuple[dict[str, Any], str]]:
    read_only = np.empty((4, 6), np.float32)
    read_only.flags.writeable = False
    wide = ctx.view(ctx.allocate(4 * 8 * 4), 0, (4, 6), (8, 1), np.float32)  # rows 8 apart, the graph's 6
    return [
        ({**data, "x": data["x"].astype(np.float64)}, r"'x' \(uid \d+\): got float64\[4, 6\], the graph has float32"),
        ({**data, "x": data["x"][:3]}, r"got float32\[3, 6\], the graph has float32\[4, 6\]"),
        ({**data, "y": read_only}, r"'y' .*: output array is read-only"),
        ({**data, "x": ctx.to_device(data["x"].astype(np.float16))}, r"'x' .*: got float16\[4, 6\], the graph has"),
        ({**data, "x": ctx.to_device(data["x"][:, :5])}, r"got float32\[4, 5\], the graph has float32\[4, 6\]"),
        ({**data, "x": wide}, r"'x' .*: device strides \[8, 1\] differ from the graph's \[6, 1\]"),
        ({**data, "x": [[0.0] * 6] * 4}, r"'x' .*: list exposes neither __cuda_array_interface__ nor __dlpack__"),
    ]


@pytest.mark.parametrize("path", ["bound", "generic"])
def test_buffers_that_do_not_match_are_refused(path):
    g = small()
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    ctx = ex.memory.context
    data = ints(10)
    kw = {"on_step": lambda *a: None} if path == "generic" else {}
    for pack, message in bad_packs(ctx, data):
        with pytest.raises(VariantPackError, match=message):
            ex.execute(plan, pack, **kw)


def test_a_stride_of_a_unit_dim_is_free():
    g = small()
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    ctx = ex.memory.context
    data = ints(11)
    b = ctx.view(ctx.allocate(6 * 4), 0, (1, 6), (99, 1), np.float32)  # dim 1: its stride is never used
    ctx.copy_into(ctx.view(b.owner, 0, (6,), None, np.float32), data["b"][0])
    for kw in ({}, {"on_step": lambda *a: None}):
        assert np.array_equal(ex.execute(plan, {"x": data["x"], "b": b}, **kw)["y"], want(data))


# -- GpuRun: the generic path (on_step, capture) ------------------------------------------------


def test_the_generic_path_copies_in_and_out_and_delivers_as_asked():
    g = small()
    ex = host_gpu_executor(fusion=False)
    plan = ex.prepare(g)
    ctx = ex.memory.context
    data = ints(12)
    steps: list[int] = []
    y = np.zeros((4, 6), np.float32)
    got = ex.execute(plan, {**data, "y": y}, on_step=lambda i, *a: steps.append(i))["y"]
    assert got is y and np.array_equal(y, want(data)) and steps == list(range(len(plan.steps)))
    capture: dict[str, Any] = {}
    got = ex.execute(plan, {**data, "s": 2.0}, capture=capture, to_host=False)["y"]
    assert isinstance(got, DeviceArray) and np.array_equal(ctx.to_host(got), want(data, 2.0))
    assert isinstance(capture["y"], DeviceArray) and np.array_equal(ctx.to_host(capture["y"]), want(data, 2.0))
    assert len(capture) == len(plan.steps)  # every step's output, a device copy (outputs stay on the device)
    on_host: dict[str, Any] = {}
    host = ex.execute(plan, {**data, "x": ctx.to_device(data["x"])}, capture=on_host)["y"]
    assert isinstance(host, np.ndarray) and np.array_equal(host, want(data))
    assert np.array_equal(on_host["y"], want(data)) and all(isinstance(v, np.ndarray) for v in on_host.values())


def test_the_generic_path_workspace_is_none_without_scratch():
    run = GpuMemory(context=HostGpuContext()).session()
    assert run.workspace(0) is None
    ws = run.workspace(40)
    assert ws.shape == (40,) and ws.dtype == np.uint8


def test_a_run_ends_synchronized_on_both_paths():
    ctx = CountingContext()
    ex = executor_on(ctx, fusion=False)
    plan = ex.prepare(small())
    data = ints(13)
    assert np.array_equal(ex.execute(plan, data)["y"], want(data)) and ctx.syncs == 1  # bound path
    dev = {
        "x": ctx.to_device(data["x"]),
        "b": ctx.to_device(data["b"]),
        "y": ctx.to_device(np.zeros((4, 6), np.float32)),
    }
    ex.execute(plan, dev, to_host=False)  # no torch stream to hand over to: the run waits for the device
    assert ctx.syncs == 2 and np.array_equal(ctx.to_host(dev["y"]), want(data))
    ex.execute(plan, data, capture={})  # generic path
    assert ctx.syncs == 3
    ex.execute(plan, data, on_step=lambda *a: None)  # and after each step
    assert ctx.syncs == 4 + len(plan.steps)


def test_a_scalar_is_uploaded_again_only_when_its_value_changes():
    ctx = CountingContext()
    ex = executor_on(ctx)
    plan = ex.prepare(small())
    data = ints(14)
    dev = {
        "x": ctx.to_device(data["x"]),
        "b": ctx.to_device(data["b"]),
        "y": ctx.to_device(np.zeros((4, 6), np.float32)),
    }
    before = ctx.uploads
    for s, uploads in ((None, 1), (None, 1), (0.5, 1), (2.0, 2), (2.0, 2), (None, 3)):
        ex.execute(plan, dev if s is None else {**dev, "s": s}, to_host=False)
        assert ctx.uploads - before == uploads, s
        assert np.array_equal(ctx.to_host(dev["y"]), want(data, 0.5 if s is None else s))


def test_a_stride_of_a_dim_of_two_must_match():
    g = sigdnn.Graph("two", io_dtype="float32", compute_dtype="float32")
    g.pointwise("relu_fwd", g.tensor("x", dims=(2, 3))).set_output(True).set_name("y")
    ex = host_gpu_executor()
    ctx = ex.memory.context
    plan = ex.prepare(g)
    x = ctx.view(ctx.allocate(2 * 4 * 4), 0, (2, 3), (4, 1), np.float32)
    with pytest.raises(VariantPackError, match=r"device strides \[4, 1\] differ from the graph's \[3, 1\]"):
        ex.execute(plan, {"x": x})


def test_a_host_torch_tensor_is_refused_as_a_device_buffer():
    torch = pytest.importorskip("torch")
    ex = host_gpu_executor()
    plan = ex.prepare(small())
    data = ints(16)
    with pytest.raises(VariantPackError, match=r"'x' .*: the torch tensor is not on a CUDA device"):
        ex.execute(plan, {**data, "x": torch.from_numpy(data["x"])})


class ScratchPlan(NodePlan):
    """neg through the host, checking the workspace it asked for."""

    workspace_bytes = 100

    def execute(self, buffers: Any, context: Any) -> None:
        ws, ctx = context.workspace, context.device.context
        assert ws.nbytes == 100 and ws.dtype == np.uint8
        ctx.copy_into(ws, np.arange(100, dtype=np.uint8))  # the whole slice is writable memory
        ctx.copy_into(buffers["out_0"], -ctx.to_host(buffers["in_0"]))


class ScratchNeg(PlanBuilder):
    name: ClassVar[str] = "plugin.scratch_neg_gpu"
    engine_id: ClassVar[int] = 31201
    library: ClassVar[str] = "plugin"
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)
    device: ClassVar[str] = "gpu"

    def serves(self, key: Any) -> bool:
        return key.trait("mode") == "neg"

    def build(self, node: Any, graph: Any, context: Any) -> NodePlan:
        return ScratchPlan()


def test_the_bound_workspace_is_the_plan_s_size():
    registry = Registry(packages=(), entry_point_group=None)  # this builder alone
    registry.register(ScratchNeg())
    g = sigdnn.Graph("neg", io_dtype="float32")
    g.pointwise("neg", g.tensor("x", (4,))).set_output(True).set_name("y")
    ex = executor_on(HostGpuContext(), registry=registry)
    plan = ex.prepare(g)
    assert plan.workspace_bytes == 100
    x = np.array([1.0, -2.0, 0.5, 0.0], np.float32)
    for kw in ({}, {"capture": {}}):  # bound and generic paths
        assert np.array_equal(ex.execute(plan, {"x": x}, **kw)["y"], -x)
