"""Intermediates living in a caller's output until it is written (sigdnn/executor/hosting.py), on the GPU
backend's memory paths over host memory (HostGpuContext: BoundPlan and GpuRun unchanged, kernels emulated).

The graph: a = relu(x); b = a * s; y = b + x. ``a`` dies at step 1, where
the arena peaks (a and b), before y is first written (step 2), so it lives
in y's buffer. The
caller's buffer must hold it only when that cannot change a result: an
output given the input's memory (an in-place update, which reads x after a
would overwrite it), a misaligned one, or one the run allocates itself
sends the guest to the binding's own buffer instead.
"""

from __future__ import annotations

import numpy as np
import pytest
from emulated import host_gpu_executor, make_available

import sigdnn
from sigdnn.runtime.device_array import DeviceArray

DIMS = (3, 700)


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def residual() -> sigdnn.Graph:
    g = sigdnn.Graph("residual", io_dtype="float16", intermediate_dtype="float16", compute_dtype="float32")
    x = g.tensor("x", dims=DIMS)
    a = g.pointwise("relu_fwd", x, name="relu_a")
    b = g.pointwise("mul", a, g.scalar("s", 0.5), name="half")
    g.pointwise("add", b, x, name="skip").set_output(True).set_name("y")
    return g


def inputs() -> np.ndarray:
    return np.random.default_rng(0).standard_normal(DIMS).astype(np.float16)


def want(x: np.ndarray) -> np.ndarray:
    return sigdnn.Executor("reference").run(residual(), {"x": x})["y"]


def aligned(ctx, host: np.ndarray, shift: int = 0) -> DeviceArray:
    """A device copy of ``host`` starting ``shift`` bytes past a 256-byte boundary (HostGpuContext's own
    allocations are NumPy's, aligned to less)."""
    block = ctx.allocate(host.nbytes + 512)
    ptr = -(-block.handle // 256) * 256 + shift
    array = DeviceArray(ptr, host.shape, None, host.dtype, owner=block)
    ctx._copy_h2d(ptr, host)
    return array


def guest_address(ex, plan) -> int:
    (uid,) = plan.memory.hosted
    return ex.memory.bound(plan, False).buffers[uid].ptr


def inside(ptr: int, array: DeviceArray) -> bool:
    return array.ptr <= ptr < array.ptr + array.nbytes


def test_the_plan_places_a_in_y_and_its_arena_shrinks():
    g = residual()
    plan = host_gpu_executor(fusion=False).prepare(g)
    a = g.tensor_by_name("relu_a::out_0")
    y = g.tensor_by_name("y")
    assert plan.memory.hosted == {a.uid: (y.uid, 0)} and a.uid not in plan.memory.offsets
    assert plan.as_dict()["memory"]["intermediates_in_outputs"] == {"relu_a::out_0": "y"}
    assert "intermediates in outputs not yet written: relu_a::out_0 in y" in plan.describe()
    on_cpu = sigdnn.Executor("reference", fusion=False).prepare(residual())  # the reference lends nothing
    assert not on_cpu.memory.hosted and plan.memory.peak_bytes < on_cpu.memory.peak_bytes


def test_a_given_output_holds_the_guest_and_follows_when_it_moves():
    ex = host_gpu_executor(fusion=False)
    plan = ex.prepare(residual())
    ctx = ex.memory.context
    x = inputs()
    for _ in range(2):  # the second run's y is a new buffer: the guest's steps are bound again to it
        y = aligned(ctx, np.zeros(DIMS, np.float16))
        got = ex.execute(plan, {"x": ctx.to_device(x), "y": y})["y"]
        assert np.array_equal(got, want(x))
        assert inside(guest_address(ex, plan), y)
    assert ex.memory.bound(plan, False).spare_bytes == 0


def test_an_output_given_the_input_s_memory_keeps_the_guest_out_of_it():
    ex = host_gpu_executor(fusion=False)
    plan = ex.prepare(residual())
    ctx = ex.memory.context
    x = inputs()
    shared = aligned(ctx, x)
    got = ex.execute(plan, {"x": shared, "y": shared})["y"]  # y = relu(x) / 2 + x, written over x
    assert np.array_equal(got, want(x))
    assert not inside(guest_address(ex, plan), shared)
    assert ex.memory.bound(plan, False).spare_bytes == x.nbytes  # what the run held for the guest instead


def test_a_misaligned_output_keeps_the_guest_out_of_it():
    ex = host_gpu_executor(fusion=False)
    plan = ex.prepare(residual())
    ctx = ex.memory.context
    x = inputs()
    y = aligned(ctx, np.zeros(DIMS, np.float16), shift=2)
    got = ex.execute(plan, {"x": ctx.to_device(x), "y": y})["y"]
    assert np.array_equal(got, want(x))
    assert not inside(guest_address(ex, plan), y)


def test_an_output_the_run_allocates_lends_nothing_so_no_step_is_bound_again():
    ex = host_gpu_executor(fusion=False)
    plan = ex.prepare(residual())
    x = inputs()
    assert np.array_equal(ex.execute(plan, {"x": x})["y"], want(x))
    bound = ex.memory.bound(plan, False)
    before, guest = list(bound._launches), guest_address(ex, plan)
    assert np.array_equal(ex.execute(plan, {"x": x})["y"], want(x))
    assert guest_address(ex, plan) == guest
    y = residual().tensor_by_name("y").uid
    rebound = [old is not new for old, new in zip(before, bound._launches)]
    assert rebound == [y in s.bindings.values() for s in plan.steps]  # only the step writing the fresh y


@pytest.mark.parametrize("in_place", [False, True])
def test_the_captured_path_hosts_the_same_way(in_place):
    """Validation's path (GpuRun, every step captured): the guest's value is captured before y overwrites it."""
    ex = host_gpu_executor(fusion=False)
    plan = ex.prepare(residual())
    ctx = ex.memory.context
    x = inputs()
    given = aligned(ctx, x)
    y = given if in_place else aligned(ctx, np.zeros(DIMS, np.float16))
    captured: dict = {}
    got = ex.execute(plan, {"x": given, "y": y}, capture=captured)["y"]
    assert np.array_equal(got, want(x))
    assert np.array_equal(captured["relu_a::out_0"], np.maximum(x, 0))
