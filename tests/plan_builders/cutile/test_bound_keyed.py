"""``Executor.execute_keyed``: once a run has checked a call in full, a bound plan reads the same uids' tensors by
address alone, and only then.

sigdnn.torch's cached graphs key on each tensor's shape, strides, dtype and
device, so the identity checks a bound run makes per tensor are theirs to
skip. The fake tensors present host memory as torch CUDA tensors (see
fake_torch.py); torch's current stream is the executor's own here.
"""

from __future__ import annotations

import numpy as np
import pytest
from emulated import HostGpuContext, host_gpu_executor, make_available
from fake_torch import FakeCudaTensor

import sigdnn
from sigdnn.errors import UsageError, VariantPackError
from sigdnn.executor import gpu_memory


@pytest.fixture
def checked(monkeypatch):
    """The bound runs that checked their call in full, on a GPU executor over host memory."""
    make_available(monkeypatch)
    monkeypatch.setattr(gpu_memory, "current_torch_stream", lambda objs: 0)  # torch's stream: the executor's own
    calls = []
    original = gpu_memory.BoundPlan.run

    def counted(self, pack, to_host):
        calls.append(pack)
        return original(self, pack, to_host)

    monkeypatch.setattr(gpu_memory.BoundPlan, "run", counted)
    return calls


def scaled_sum() -> sigdnn.Graph:
    g = sigdnn.Graph("g", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(4, 6))
    b = g.tensor("b", dims=(4, 6))
    g.pointwise("mul", g.pointwise("add", x, b), g.scalar("s", 2.0)).set_output(True).set_name("y")
    return g


def setup() -> tuple[sigdnn.Executor, sigdnn.ExecutionPlan, tuple[int, ...]]:
    ex = host_gpu_executor()
    plan = ex.prepare(scaled_sum())
    uids = tuple(plan.graph.tensor_by_name(name).uid for name in "xby")
    return ex, plan, uids


def arrays(*values: float) -> list[np.ndarray]:
    return [np.full((4, 6), v, np.float32) for v in values]


def test_the_first_call_is_checked_in_full_and_later_ones_read_addresses(checked):
    ex, plan, uids = setup()
    x, b, y = arrays(1.0, 2.0, 0.0)
    ex.execute_keyed(plan, uids, [FakeCudaTensor(a) for a in (x, b, y)])
    assert len(checked) == 1 and (y == 6.0).all()
    x2, y2 = arrays(5.0, 0.0)  # x and y at new addresses, b where it was
    for contents in (5.0, 7.0):  # new contents at the same addresses
        x2[...] = contents
        ex.execute_keyed(plan, uids, [FakeCudaTensor(a) for a in (x2, b, y2)])
        np.testing.assert_array_equal(y2, np.full((4, 6), (contents + 2) * 2, np.float32))
    assert len(checked) == 1
    np.testing.assert_array_equal(y, np.full((4, 6), 6.0, np.float32))  # the old output is left alone
    ex.execute_keyed(plan, uids, [FakeCudaTensor(a) for a in (x, b, y)])  # back at the first addresses
    np.testing.assert_array_equal(y, np.full((4, 6), 6.0, np.float32))
    assert len(checked) == 1


def test_a_bad_first_call_is_refused_with_the_tensor_named(checked):
    ex, plan, uids = setup()
    x, b, y = arrays(1.0, 2.0, 0.0)
    with pytest.raises(VariantPackError, match="tensor 'b'"):
        ex.execute_keyed(plan, uids, [FakeCudaTensor(x), FakeCudaTensor(b.view(np.int32)), FakeCudaTensor(y)])
    with pytest.raises(VariantPackError, match=r"tensor 'x'.*on GPU 1, the executor runs on GPU 0"):
        ex.execute_keyed(plan, uids, [FakeCudaTensor(x, device=1), FakeCudaTensor(b), FakeCudaTensor(y)])
    ex.execute_keyed(plan, uids, [FakeCudaTensor(a) for a in (x, b, y)])
    ex.execute_keyed(plan, uids, [FakeCudaTensor(a) for a in (x, b, y)])
    assert len(checked) == 3 and (y == 6.0).all()  # the two refused, the first good call; the second is keyed


def test_a_call_of_other_uids_or_objects_is_checked_in_full(checked):
    ex, plan, uids = setup()
    x, b, y = arrays(1.0, 2.0, 0.0)
    ex.execute_keyed(plan, uids, [FakeCudaTensor(a) for a in (x, b, y)])
    reordered = (uids[1], uids[0], uids[2])
    ex.execute_keyed(plan, reordered, [FakeCudaTensor(a) for a in (b, x, y)])
    assert len(checked) == 2  # other uids (the same ones in another order): checked in full
    ex.execute_keyed(plan, reordered, [FakeCudaTensor(a) for a in (b, x, y)])
    assert len(checked) == 2
    ex.execute(plan, {"x": x, "b": FakeCudaTensor(b), "y": FakeCudaTensor(y)}, to_host=False)  # x from the host
    x[...] = 3.0
    ex.execute_keyed(plan, reordered, [FakeCudaTensor(a) for a in (b, x, y)])
    assert len(checked) == 4 and (y == 10.0).all()  # the host run left the fast path unset
    with pytest.raises(UsageError, match="one tensor per uid"):
        ex.execute_keyed(plan, uids, [FakeCudaTensor(a) for a in (x, b)])
    with pytest.raises(UsageError, match="ExecutionPlan"):
        ex.execute_keyed(plan.graph, uids, [FakeCudaTensor(a) for a in (x, b, y)])


@pytest.mark.parametrize("last_run", ["fresh output", "scalar given", "failed run"])
def test_a_run_the_fast_path_cannot_follow_leaves_it_unset(checked, last_run):
    ex, plan, uids = setup()
    x, b, y = arrays(1.0, 2.0, 0.0)
    tensors = [FakeCudaTensor(a) for a in (x, b, y)]
    ex.execute_keyed(plan, uids, tensors)
    pack = {"x": FakeCudaTensor(x), "b": FakeCudaTensor(b), "y": FakeCudaTensor(y)}
    if last_run == "fresh output":
        del pack["y"]
    else:
        pack["s"] = 3.0
    if last_run == "failed run":  # the scalar is staged (uid order: x, b, s, y), then y is refused
        pack["y"] = FakeCudaTensor(y.view(np.int32))
        with pytest.raises(VariantPackError, match="tensor 'y'"):
            ex.execute(plan, pack, to_host=False)
    else:
        ex.execute(plan, pack, to_host=False)
    bound = ex.memory.bound(plan, ex.cuda_graphs)
    given = tuple(plan.graph.tensor_by_name(name).uid for name in pack)
    objs = [v if isinstance(v, FakeCudaTensor) else FakeCudaTensor(np.asarray(v, np.float32)) for v in pack.values()]
    assert bound.run_keyed(given, objs) is False
    assert bound.run_keyed(uids, tensors) is False
    y[...] = 0.0
    ex.execute_keyed(plan, uids, tensors)  # checked in full: the graph's scalar staged back
    np.testing.assert_array_equal(y, np.full((4, 6), 6.0, np.float32))
    assert bound.run_keyed(uids, tensors) is True


@pytest.mark.parametrize("last_run", ["host output", "the executor's stream"])
def test_a_run_on_host_arrays_or_the_executors_stream_may_be_followed(checked, monkeypatch, last_run):
    ex, plan, uids = setup()
    x, b, y = arrays(1.0, 2.0, 0.0)
    pack = {"x": FakeCudaTensor(x), "b": FakeCudaTensor(b), "y": y if last_run == "host output" else FakeCudaTensor(y)}
    if last_run == "the executor's stream":
        monkeypatch.setattr(gpu_memory, "current_torch_stream", lambda objs: None)
    ex.execute(plan, pack, to_host=False)
    monkeypatch.setattr(gpu_memory, "current_torch_stream", lambda objs: 0)
    x[...], y[...] = 4.0, 0.0
    assert ex.memory.bound(plan, ex.cuda_graphs).run_keyed(uids, [FakeCudaTensor(a) for a in (x, b, y)]) is True
    np.testing.assert_array_equal(y, np.full((4, 6), 12.0, np.float32))


def test_a_tensor_on_another_device_is_never_taken_by_address(checked):
    ex, plan, uids = setup()
    x, b, y = arrays(1.0, 2.0, 0.0)
    ex.execute_keyed(plan, uids, [FakeCudaTensor(a) for a in (x, b, y)])
    elsewhere = [FakeCudaTensor(x), FakeCudaTensor(b, device=1), FakeCudaTensor(y)]
    assert ex.memory.bound(plan, ex.cuda_graphs).run_keyed(uids, elsewhere) is False
    with pytest.raises(VariantPackError, match="tensor 'b'"):
        ex.execute_keyed(plan, uids, elsewhere)


def test_without_a_torch_stream_nothing_is_taken_by_address(checked, monkeypatch):
    ex, plan, uids = setup()
    tensors = [FakeCudaTensor(a) for a in arrays(1.0, 2.0, 0.0)]
    ex.execute_keyed(plan, uids, tensors)
    monkeypatch.setattr(gpu_memory, "current_torch_stream", lambda objs: None)
    assert ex.memory.bound(plan, ex.cuda_graphs).run_keyed(uids, tensors) is False


def test_the_outputs_stay_on_the_device(checked, monkeypatch):
    """The checked first call runs as ``execute(..., to_host=False)``: the outputs are the caller's, written in
    place, and nothing is copied back (a copy would synchronize the stream)."""
    copies = []
    monkeypatch.setattr(HostGpuContext, "to_host", lambda self, arr: copies.append(arr))
    ex, plan, uids = setup()
    x, b, y = arrays(1.0, 2.0, 0.0)
    for _ in range(2):
        ex.execute_keyed(plan, uids, [FakeCudaTensor(a) for a in (x, b, y)])
    assert copies == [] and (y == 6.0).all()
