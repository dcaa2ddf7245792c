"""The GPU executor's host side (GpuMemory, BoundPlan) on a host-backed context with emulated kernels.

What is bound once (arena, workspace, staging, every step's launch) must not
be made again on the next execute, and a caller buffer that moves must
rebind exactly the steps that touch it, with the right results each time.
"""

from __future__ import annotations

import types

import numpy as np
import pytest
from emulated import host_gpu_executor, make_available

import sigdnn
from sigdnn.plan_builders.cutile.backend import EmulatedBackend
from sigdnn.validation import random_inputs


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def chain(n: int = 6, dtype: str = "float16") -> sigdnn.Graph:
    g = sigdnn.Graph("chain", io_dtype=dtype, intermediate_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", dims=(3, 700))
    b = g.tensor("b", dims=(1, 700))
    s = g.scalar("s", 0.5)
    v = x
    for i in range(n):
        v = g.pointwise(("add", "mul", "relu_fwd")[i % 3], *((v, b) if i % 3 == 0 else (v, s) if i % 3 == 1 else (v,)))
    v.set_output(True).set_name("y")
    return g


def reference(g, data):
    return sigdnn.Executor("reference").run(g, data)


@pytest.fixture
def counted(monkeypatch):
    calls = {"view1d": 0}
    original = EmulatedBackend.view1d

    def view1d(*args):
        calls["view1d"] += 1
        return original(*args)

    monkeypatch.setattr(EmulatedBackend, "view1d", staticmethod(view1d))
    return calls


def test_second_execute_binds_and_allocates_nothing(counted):
    g = chain()
    ex = host_gpu_executor(fusion=False)
    plan = ex.prepare(g)
    data = random_inputs(g, seed=1)
    out = np.empty((3, 700), np.float16)
    first = ex.execute(plan, {**data, "y": out})
    want = reference(g, data)["y"]
    assert np.array_equal(first["y"], want) and first["y"] is out
    allocations, views = ex.memory.context.allocations, counted["view1d"]
    data2 = random_inputs(g, seed=2)
    second = ex.execute(plan, {**data2, "y": out})
    assert np.array_equal(second["y"], reference(g, data2)["y"])
    assert ex.memory.context.allocations == allocations  # arena, staging and scalars came from the binding
    assert counted["view1d"] == views  # every launch's arguments were bound once


def test_a_moved_caller_buffer_rebinds_only_the_steps_that_touch_it():
    g = chain(6)
    ex = host_gpu_executor(fusion=False)
    plan = ex.prepare(g)
    ctx = ex.memory.context
    data = random_inputs(g, seed=3)
    first = ctx.to_device(data["x"])  # kept alive: the second x cannot take its address
    ex.execute(plan, {"x": first, "b": data["b"]})
    bound = ex.memory.bound(plan, False)
    before = list(bound._launches)
    x2 = data["x"] * np.float16(2)
    second = ctx.to_device(x2)
    assert second.ptr != first.ptr
    got = ex.execute(plan, {"x": second, "b": data["b"]})["y"]  # x at another address
    assert np.array_equal(got, reference(g, {"x": x2, "b": data["b"]})["y"])
    kept = [old is new for old, new in zip(before, bound._launches)]
    moved = {g.tensor_by_name("x").uid, g.outputs[0].uid}  # y is not given: a fresh buffer each run
    touches = [any(u in moved for u in s.bindings.values()) for s in plan.steps]
    assert kept == [not t for t in touches] and any(kept) and not all(kept)


def test_scalar_override_is_restaged_only_when_it_changes():
    g = chain(3)
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    data = random_inputs(g, seed=4)
    for s in (0.5, 0.5, -1.25):
        got = ex.execute(plan, {**data, "s": s})["y"]
        assert np.array_equal(got, reference(g, {**data, "s": s})["y"]), s


def test_fused_plan_on_the_bound_path_matches_validation():
    g = chain(9, "bfloat16")
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    assert len(plan.steps) == 1
    data = random_inputs(g, seed=5)
    assert np.array_equal(ex.execute(plan, data)["y"], reference(g, data)["y"])
    report = sigdnn.validate(g, data, executor=ex)  # the generic path (captures) on the same memory
    assert report.passed, report.table()


@pytest.fixture
def resolutions(monkeypatch):
    from sigdnn.executor import gpu_memory

    calls = []
    original = gpu_memory.resolve_pack

    def counted(*args, **kwargs):
        calls.append(tuple(args[1]))
        return original(*args, **kwargs)

    monkeypatch.setattr(gpu_memory, "resolve_pack", counted)
    return calls


def test_a_pack_keyed_as_before_skips_resolution_and_any_other_pack_is_checked(resolutions):
    g = chain(3)
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    for seed in (6, 7, 8):
        data = random_inputs(g, seed=seed)
        got = ex.execute(plan, {"x": data["x"], "b": data["b"]})["y"]
        assert np.array_equal(got, reference(g, data)["y"]), seed
    assert resolutions == [("x", "b")]  # resolved once, then matched by its keys
    swapped = random_inputs(g, seed=9)
    got = ex.execute(plan, {"b": swapped["b"], "x": swapped["x"]})["y"]  # other order: resolved, values follow keys
    assert np.array_equal(got, reference(g, swapped)["y"]) and resolutions[-1] == ("b", "x")
    with pytest.raises(sigdnn.VariantPackError, match="missing input"):
        ex.execute(plan, {"x": data["x"]})
    with pytest.raises(sigdnn.VariantPackError, match="extra entry 'z'"):
        ex.execute(plan, {"x": data["x"], "b": data["b"], "z": data["b"]})
    seen = len(resolutions)
    got = ex.execute(plan, {"b": data["b"], "x": data["x"]})["y"]  # the keys last resolved: matched again
    assert len(resolutions) == seen and np.array_equal(got, reference(g, data)["y"])


def test_a_pack_with_a_scalar_override_is_resolved_every_time(resolutions):
    g = chain(3)
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    data = random_inputs(g, seed=10)
    for s in (0.5, -2.0):
        got = ex.execute(plan, {"x": data["x"], "b": data["b"], "s": s})["y"]
        assert np.array_equal(got, reference(g, {**data, "s": s})["y"]), s
    assert len(resolutions) == 2


def test_a_uid_key_is_matched_only_as_a_plain_int(resolutions):
    """2.0 equals 2 (and True equals 1) as a key, yet is no uid: a pack whose keys only equal the last must be
    checked, and raise."""
    g = chain(3)
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    data = random_inputs(g, seed=11)
    uid = next(u for u, t in g.tensors.items() if t.name == "b")
    for _ in range(2):
        got = ex.execute(plan, {"x": data["x"], uid: data["b"]})["y"]
        assert np.array_equal(got, reference(g, data)["y"])
    assert resolutions == [("x", uid)]
    with pytest.raises(sigdnn.VariantPackError, match="neither a tensor name, a uid nor a Tensor"):
        ex.execute(plan, {"x": data["x"], float(uid): data["b"]})
    first = next(u for u, t in g.tensors.items() if t.name == "x")
    assert first == 1
    ex.execute(plan, {first: data["x"], uid: data["b"]})
    with pytest.raises(sigdnn.VariantPackError, match="neither a tensor name, a uid nor a Tensor"):
        ex.execute(plan, {True: data["x"], uid: data["b"]})
    wide = {np.int64(first): data["x"], np.int64(uid): data["b"]}  # a uid, though not a plain int: checked
    got = ex.execute(plan, wide)["y"]
    assert np.array_equal(got, reference(g, data)["y"]) and len(resolutions) == 5
    mixed = {"x": data["x"], np.int64(uid): data["b"]}  # one key not plain: never matched, so 2.0 cannot be
    ex.execute(plan, mixed)
    ex.execute(plan, mixed)
    with pytest.raises(sigdnn.VariantPackError, match="neither a tensor name, a uid nor a Tensor"):
        ex.execute(plan, {"x": data["x"], float(uid): data["b"]})
    assert len(resolutions) == 8


def test_a_pack_that_is_no_dict_is_resolved_every_time(resolutions):
    g = chain(3)
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    data = random_inputs(g, seed=13)
    for _ in range(2):
        got = ex.execute(plan, types.MappingProxyType({"x": data["x"], "b": data["b"]}))["y"]
        assert np.array_equal(got, reference(g, data)["y"])
    assert len(resolutions) == 2


def test_graph_constants_are_uploaded_once_and_an_override_serves_one_run() -> None:
    """An ONNX model's weights are graph constants: the bound plan stages each once (not a fresh, unwritten
    buffer per run, which ran every torchvision export on the H200 with garbage weights), and a caller's array
    for one is used for that run only."""
    rng = np.random.default_rng(3)
    g = sigdnn.Graph("constants", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(2, 64, 96))
    w = g.constant("w", rng.standard_normal((1, 64, 96)).astype(np.float32))
    g.pointwise("mul", x, w, name="scale").set_output(True).set_name("y")
    xs = rng.standard_normal((2, 64, 96)).astype(np.float32)
    override = rng.standard_normal((1, 64, 96)).astype(np.float32)
    ex = host_gpu_executor()
    plan = ex.prepare(g)
    before = None
    for pack, weight in (({}, w.constant()), ({}, w.constant()), ({"w": override}, override), ({}, w.constant())):
        got = ex.execute(plan, {"x": xs, **pack})["y"]
        np.testing.assert_array_equal(got, xs * weight)
        allocations = ex.memory.context.allocations
        if before is not None and not pack:
            assert allocations == before + 1  # the output only: the constant's staging is kept
        before = allocations
