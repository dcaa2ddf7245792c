"""A bound plan reuses the view of a caller's torch tensor while the tensor's identity holds, and only then.

Wrapping a torch tensor (a DeviceArray per tensor per call) was half the
host time of an execute on a conv region. The fake tensors below present
host memory as CUDA tensors the way torch does (data_ptr, dtype, shape,
stride, get_device), so the reuse rule runs here: the same address, device,
dtype, shape and strides give the same view; any of them changed gives a new view,
checked again and rebound, with the right results.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest
from emulated import host_gpu_executor, make_available
from fake_torch import FakeCudaTensor

import sigdnn
from sigdnn.errors import VariantPackError
from sigdnn.executor import gpu_buffers, gpu_memory
from sigdnn.runtime.cuda import GpuContext


@pytest.fixture
def fake_gpu(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(gpu_memory, "current_torch_stream", lambda objs: None)  # no torch stream to order after here


@pytest.fixture
def wraps(fake_gpu, monkeypatch):
    calls = []
    original = GpuContext._wrap_torch

    def counted(self, t):
        calls.append(t)
        return original(self, t)

    monkeypatch.setattr(GpuContext, "_wrap_torch", counted)
    return calls


def scaled_sum() -> sigdnn.Graph:
    g = sigdnn.Graph("g", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(4, 6))
    b = g.tensor("b", dims=(4, 6))
    g.pointwise("mul", g.pointwise("add", x, b), g.scalar("s", 2.0)).set_output(True).set_name("y")
    return g


def run(ex, plan, x, b, y):
    ex.execute(plan, {"x": FakeCudaTensor(x), "b": FakeCudaTensor(b), "y": FakeCudaTensor(y)}, to_host=False)
    return y


def test_same_tensors_are_wrapped_once(wraps):
    ex = host_gpu_executor()
    plan = ex.prepare(scaled_sum())
    x, b, y = np.arange(24.0, dtype=np.float32).reshape(4, 6), np.ones((4, 6), np.float32), np.zeros((4, 6), np.float32)
    run(ex, plan, x, b, y)
    assert len(wraps) == 3
    x += 1  # new contents at the same address: the view stays right
    for _ in range(3):
        np.testing.assert_array_equal(run(ex, plan, x, b, y), (x + 1) * 2)
    assert len(wraps) == 3


def test_new_tensor_objects_over_the_same_memory_reuse_the_views(wraps):
    ex = host_gpu_executor()
    plan = ex.prepare(scaled_sum())
    x, b, y = (np.full((4, 6), v, np.float32) for v in (1.0, 2.0, 0.0))
    run(ex, plan, x, b, y)
    run(ex, plan, x, b, y)  # run() makes new FakeCudaTensor objects each time
    assert len(wraps) == 3
    np.testing.assert_array_equal(y, np.full((4, 6), 6.0, np.float32))


def test_a_tensor_at_another_address_is_wrapped_and_bound_again(wraps):
    ex = host_gpu_executor()
    plan = ex.prepare(scaled_sum())
    x, b, y = (np.full((4, 6), v, np.float32) for v in (1.0, 2.0, 0.0))
    run(ex, plan, x, b, y)
    x2 = np.full((4, 6), 5.0, np.float32)
    y2 = np.zeros((4, 6), np.float32)
    run(ex, plan, x2, b, y2)
    assert len(wraps) == 5  # x and y moved, b did not
    np.testing.assert_array_equal(y2, np.full((4, 6), 14.0, np.float32))
    np.testing.assert_array_equal(y, np.full((4, 6), 6.0, np.float32))


def test_the_binding_keeps_none_of_the_callers_tensors_alive(fake_gpu):
    """Owning them would keep torch's allocator from giving the next call's outputs the same block."""
    ex = host_gpu_executor()
    plan = ex.prepare(scaled_sum())
    arrays = [np.full((4, 6), v, np.float32) for v in (1.0, 2.0, 0.0)]
    for _ in range(2):  # the second run reuses the views made by the first
        tensors = dict(zip("xby", map(FakeCudaTensor, arrays)))
        ex.execute(plan, tensors, to_host=False)
        alive = [weakref.ref(t) for t in tensors.values()]
        del tensors
        gc.collect()
        assert [ref() for ref in alive] == [None, None, None]
    np.testing.assert_array_equal(arrays[2], np.full((4, 6), 6.0, np.float32))


@pytest.mark.parametrize("path", ["bound", "stepwise"])
def test_an_output_the_caller_gave_comes_back_as_the_callers_object(wraps, path):
    ex = host_gpu_executor()
    plan = ex.prepare(scaled_sum())
    y = FakeCudaTensor(np.zeros((4, 6), np.float32))
    pack = {"x": FakeCudaTensor(np.ones((4, 6), np.float32)), "b": FakeCudaTensor(np.ones((4, 6), np.float32)), "y": y}
    steps = [] if path == "stepwise" else None  # an on_step callback takes the generic, step by step path
    on_step = None if steps is None else (lambda *args: steps.append(args))
    assert ex.execute(plan, pack, to_host=False, on_step=on_step)["y"] is y
    assert steps is None or len(steps) == len(plan.steps)
    np.testing.assert_array_equal(y.array, np.full((4, 6), 4.0, np.float32))
    fresh = ex.execute(plan, {"x": pack["x"], "b": pack["b"]}, to_host=False, on_step=on_step)["y"]
    assert not isinstance(fresh, FakeCudaTensor) and fresh.shape == (4, 6)  # an output not given: a new buffer


@pytest.mark.parametrize(
    "change",
    [
        {"dtype": np.int32},  # same address, dims and strides, another dtype
        {"shape": (6, 4)},  # same address, same element count, other dims
        {"strides": (1, 4)},  # same address and dims, transposed strides
        {"device": 1},  # the same address on another GPU
    ],
)
def test_a_changed_dtype_shape_or_stride_at_the_same_address_is_checked_again(wraps, change):
    ex = host_gpu_executor()
    plan = ex.prepare(scaled_sum())
    x, b, y = (np.full((4, 6), v, np.float32) for v in (1.0, 2.0, 0.0))
    run(ex, plan, x, b, y)
    if "dtype" in change:
        odd = FakeCudaTensor(x.view(change["dtype"]))
    else:
        odd = FakeCudaTensor(
            x, shape=change.get("shape"), strides=change.get("strides"), device=change.get("device", 0)
        )
    assert odd.data_ptr() == x.ctypes.data
    with pytest.raises(VariantPackError, match="tensor 'x'"):
        ex.execute(plan, {"x": odd, "b": FakeCudaTensor(b), "y": FakeCudaTensor(y)}, to_host=False)


def test_torch_objects_are_told_by_their_type_module_and_the_type_is_remembered(monkeypatch):
    monkeypatch.setattr(gpu_buffers, "TORCH_TYPES", set())
    fake = FakeCudaTensor(np.zeros(3, np.float32))
    assert not gpu_buffers.is_torch(np.zeros(3)) and not gpu_buffers.is_torch("torch")
    assert gpu_buffers.is_torch(fake) and {FakeCudaTensor} == gpu_buffers.TORCH_TYPES
    assert gpu_buffers.is_torch(fake) and not gpu_buffers.is_torch(np.zeros(3))
    assert {FakeCudaTensor} == gpu_buffers.TORCH_TYPES
