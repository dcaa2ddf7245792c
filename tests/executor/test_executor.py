"""Executor: computed order, liveness memory plan, caching, scalars, outputs."""

from __future__ import annotations

import itertools
import random

import numpy as np
import pytest

import sigdnn
from sigdnn.errors import ExecutionError
from sigdnn.executor import plan_memory
from sigdnn.graph import check_graph
from sigdnn.registry import NodePlan, PlanBuilder, Registry


def chain(length: int, n: int = 1000) -> sigdnn.Graph:
    g = sigdnn.Graph("chain", io_dtype="float32", intermediate_dtype="float32")
    t = g.tensor("x", dims=(n,))
    for i in range(length):
        t = g.pointwise("add" if i % 2 else "mul", t, t, name=f"n{i}")
    t.set_output(True).set_name("y")
    return g


def node_steps(g: sigdnn.Graph, order: list[int]) -> list[tuple[list[int], list[int]]]:
    """Each node as its own step: (reads, writes)."""
    return [(list(g.nodes[i].op.inputs().values()), list(g.nodes[i].op.outputs().values())) for i in order]


def test_nodes_in_any_order_run_in_dataflow_order() -> None:
    g = chain(12, n=5)
    x = np.linspace(-1, 1, 5, dtype=np.float32)
    want = sigdnn.Executor().run(g, {"x": x})["y"]
    shuffled = sigdnn.deserialize(g.serialize())
    random.Random(3).shuffle(shuffled.nodes)
    assert [n.name for n in shuffled.nodes] != [n.name for n in g.nodes]
    plan = sigdnn.Executor().prepare(shuffled.serialize())
    assert [s.node.name for s in plan.steps] == [f"n{i}" for i in range(12)]
    np.testing.assert_array_equal(sigdnn.Executor().execute(plan, {"x": x})["y"], want)
    v = x.astype(np.float64)
    for i in range(12):
        v = v + v if i % 2 else v * v
    np.testing.assert_array_equal(want, v.astype(np.float32))


def test_chain_peak_memory_is_two_tensors() -> None:
    g = chain(100)
    order = check_graph(g)
    mem = plan_memory(g, node_steps(g, order))
    assert mem.peak_bytes == 2 * 4096  # two 4000-byte tensors, each aligned to 256
    assert mem.total_bytes == 99 * 4096


def test_memory_plan_never_overlaps_live_tensors() -> None:
    """Fan-out/fan-in: every pair of tensors live at the same step gets disjoint bytes."""
    g = sigdnn.Graph("dag", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", dims=(300,))
    a = g.pointwise("exp", x, name="a")
    b = g.pointwise("neg", a, name="b")
    c = g.pointwise("abs", b, name="c")
    d = g.pointwise("add", a, c, name="d")  # a lives across b and c
    e = g.pointwise("mul", d, b, name="e")
    e.set_output(True).set_name("y")
    order = check_graph(g)
    mem = plan_memory(g, node_steps(g, order))
    uids = {t.name: t.uid for t in g.tensors.values()}
    steps = [g.nodes[i] for i in order]
    live: dict[int, tuple[int, int]] = {}
    for step, node in enumerate(steps):
        first = {u: s for s, n in enumerate(steps) for u in n.op.outputs().values()}
        last = {u: s for s, n in enumerate(steps) for u in n.op.ports().values()}
        live = {u: (mem.offsets[u], mem.offsets[u] + mem.sizes[u]) for u in mem.offsets if first[u] <= step <= last[u]}
        spans = sorted(live.values())
        assert all(hi <= lo2 for (_, hi), (lo2, _) in itertools.pairwise(spans)), (node.name, spans)
    assert mem.offsets[uids["a::out_0"]] != mem.offsets[uids["c::out_0"]]  # a is still live when c is made
    xa = np.linspace(-2, 2, 300, dtype=np.float32)
    av = np.exp(xa.astype(np.float64)).astype(np.float32).astype(np.float64)
    bv = (-av).astype(np.float32).astype(np.float64)
    dv = (av + np.abs(bv)).astype(np.float32).astype(np.float64)
    np.testing.assert_array_equal(sigdnn.Executor().run(g, {"x": xa})["y"], (dv * bv).astype(np.float32))


def test_prepare_caches_by_digest_and_accepts_paths(tmp_path: object) -> None:
    g = chain(3)
    ex = sigdnn.Executor()
    data = g.serialize()
    assert ex.prepare(data) is ex.prepare(bytearray(data))
    assert ex.prepare(g) is ex.prepare(data)
    path = tmp_path / "g.sdg"  # type: ignore[operator]
    path.write_bytes(data)
    assert ex.prepare(path) is ex.prepare(str(path))
    assert sigdnn.Executor().prepare(data) is not ex.prepare(data)
    with pytest.raises(sigdnn.SigdnnError, match="cannot read graph file"):
        ex.prepare(tmp_path / "missing.sdg")  # type: ignore[operator]


def test_outputs_are_written_in_place_and_keys_may_be_uids() -> None:
    g = chain(2, n=4)
    out = np.full(4, np.nan, dtype=np.float32)
    x = np.arange(4, dtype=np.float32)
    result = sigdnn.Executor().run(g, {g.tensor_by_name("x").uid: x, "y": out})
    assert result["y"] is out
    np.testing.assert_array_equal(out, (x * x) * 2)


def test_pass_by_value_scalar_from_graph_or_pack() -> None:
    g = sigdnn.Graph("scale", io_dtype="float32")
    x = g.tensor("x", dims=(3,))
    s = g.scalar("alpha", 0.5, "float32")
    g.pointwise("mul", x, s, name="scale").set_output(True).set_name("y")
    back = sigdnn.deserialize(g.serialize())
    assert back.tensor_by_name("alpha").scalar() == np.float32(0.5)
    ex = sigdnn.Executor()
    x_in = np.array([1, 2, 4], dtype=np.float32)
    np.testing.assert_array_equal(ex.run(back, {"x": x_in})["y"], [0.5, 1, 2])
    np.testing.assert_array_equal(ex.run(back, {"x": x_in, "alpha": 3.0})["y"], [3, 6, 12])
    with pytest.raises(sigdnn.VariantPackError, match=r"'alpha' \(uid 2\) takes one value"):
        ex.run(back, {"x": x_in, "alpha": np.ones(2)})


def test_strided_virtual_tensors_and_nhwc_outputs() -> None:
    g = sigdnn.Graph("nhwc", io_dtype="float16", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(2, 3, 4, 5), layout="NHWC")
    y = g.pointwise("mul", x, x, name="sq")
    assert y.strides == (60, 1, 15, 3)
    z = g.pointwise("sqrt", y, name="root").set_output(True).set_name("z")
    xa = np.random.default_rng(1).uniform(-3, 3, (2, 3, 4, 5)).astype(np.float16)
    out = sigdnn.Executor().run(g, {"x": xa})["z"]
    assert z.strides == (60, 1, 15, 3)
    np.testing.assert_array_equal(out, np.abs(xa))


def test_builder_failures_during_execute_name_the_node() -> None:
    class Boom(NodePlan):
        def execute(self, buffers: object, context: object = None) -> None:
            raise ZeroDivisionError("kaboom")

    class BoomBuilder(PlanBuilder):
        name, engine_id, library = "plugin.boom", 30099, "plugin"
        ops = ("pointwise",)
        priority = 5

        def build(self, node: object, graph: object, ctx: object) -> NodePlan:
            return Boom()

    reg = Registry()
    reg.register(BoomBuilder())
    with pytest.raises(ExecutionError, match=r"step 'n0' \(plugin.boom\) failed: ZeroDivisionError: kaboom"):
        sigdnn.Executor(registry=reg).run(chain(1), {"x": np.ones(1000, np.float32)})


def test_gpu_backend_without_a_gpu_is_a_clear_error() -> None:
    from sigdnn.runtime.cuda import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is available here")
    with pytest.raises(ExecutionError, match="gpu backend cannot run here"):
        sigdnn.Executor("gpu").prepare(chain(1))


def test_preferred_engine_id_is_tried_first() -> None:
    g = chain(1)
    g.preferred_engine_id = 1000
    assert sigdnn.Executor().prepare(g).steps[0].builder.engine_id == 1000


def test_one_plan_runs_concurrently_from_several_threads() -> None:
    """Plans are immutable and no two runs use one arena at once (a run takes the kept one only when free)."""
    from concurrent.futures import ThreadPoolExecutor

    g = chain(8, n=50_000)
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    inputs = [np.random.default_rng(i).uniform(-1, 1, 50_000).astype(np.float32) for i in range(6)]
    want = [ex.execute(plan, {"x": x})["y"] for x in inputs]
    with ThreadPoolExecutor(max_workers=3) as pool:
        got = list(pool.map(lambda x: ex.execute(plan, {"x": x})["y"], inputs))
    for w, g_ in zip(want, got):
        np.testing.assert_array_equal(w, g_)
