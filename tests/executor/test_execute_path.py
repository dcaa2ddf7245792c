"""The host execute path: what a plan works out once (PlanTensors) and the scratch it keeps between runs."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

import sigdnn
from sigdnn.dtypes import DataType
from sigdnn.executor.plan import ExecutionPlan, PlanTensors


def graph_with_every_kind() -> sigdnn.Graph:
    """Inputs, a pass-by-value scalar, a constant, two outputs and intermediates (the arena's)."""
    g = sigdnn.Graph("kinds", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", dims=(3, 4))
    b = g.tensor("b", dims=(1, 4), dtype="float16")
    s = g.scalar("s", 2.0, "float32")
    c = g.constant("c", np.arange(4, dtype=np.float32).reshape(1, 4))
    t = g.pointwise("mul", g.pointwise("add", x, b, name="add"), s, name="scale")
    g.pointwise("add", t, c, name="shift").set_output(True).set_name("y")
    g.pointwise("neg", t, name="neg").set_output(True).set_name("z").set_data_type("float16")
    return g


def oracle(x: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """IEEE float32 steps (each node rounds once to the float32 intermediates)."""
    t = (x + b.astype(np.float32)) * np.float32(2)
    return t + np.arange(4, dtype=np.float32), (-t).astype(np.float16)


def test_plan_tensors_sort_the_graphs_tensors_once() -> None:
    g = graph_with_every_kind()
    io = PlanTensors.of(g)
    uid = {name: g.tensor_by_name(name).uid for name in ("x", "b", "s", "c", "y", "z")}
    assert io.inputs == (uid["x"], uid["b"])
    assert io.outputs == (uid["y"], uid["z"]) and io.output_names == ("y", "z")
    assert io.writable == frozenset({uid["y"], uid["z"]})
    assert {u for u, _, _ in io.others} == {uid["s"], uid["c"], uid["y"], uid["z"]}  # never an input or virtual
    assert all(t.uid == u and io.dtypes[u] is d for u, t, d in io.others)
    assert io.dtypes[uid["b"]] is DataType.FLOAT16 and io.dtypes[uid["z"]] is DataType.FLOAT16
    assert all(not g.tensors[u].is_virtual for u in io.dtypes)
    assert io.names == {t.name: u for u, t in g.tensors.items()}


def test_repeated_runs_reuse_the_scratch_and_keep_results_apart() -> None:
    g = graph_with_every_kind()
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    assert plan.memory.peak_bytes > 0 and not plan.spare_scratch
    rng = np.random.default_rng(0)
    runs = []
    for _ in range(3):
        x, b = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((1, 4)).astype(np.float16)
        runs.append((x, b, ex.execute(plan, {"x": x, "b": b})))
        assert len(plan.spare_scratch) == 1  # one kept set, never more
    views = plan.spare_scratch[0][0]
    ex.execute(plan, {"x": runs[0][0], "b": runs[0][1]})
    assert plan.spare_scratch[0][0] is views  # the next run took the kept set and gave it back
    for x, b, result in runs:  # earlier results untouched by later runs
        y, z = oracle(x, b)
        np.testing.assert_array_equal(result["y"], y)
        np.testing.assert_array_equal(result["z"], z)


def test_a_failed_run_leaves_nothing_behind() -> None:
    g = graph_with_every_kind()
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    x, b = np.ones((3, 4), np.float32), np.ones((1, 4), np.float16)
    with pytest.raises(sigdnn.VariantPackError):
        ex.execute(plan, {"x": x, "b": b.astype(np.float32)})
    result = ex.execute(plan, {"x": x, "b": b})
    np.testing.assert_array_equal(result["y"], oracle(x, b)[0])


def test_outputs_given_scalars_overridden_and_constants_replaced() -> None:
    """Tensors the caller may leave out: given ones are used, the rest bound or allocated."""
    g = graph_with_every_kind()
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    x, b = np.full((3, 4), 1.0, np.float32), np.zeros((1, 4), np.float16)
    out = np.empty((3, 4), np.float32)
    result = ex.execute(plan, {"x": x, "b": b, "y": out, "s": 3.0, "c": np.full((1, 4), 10, np.float32)})
    assert result["y"] is out
    np.testing.assert_array_equal(out, np.full((3, 4), 13.0))
    np.testing.assert_array_equal(result["z"], np.full((3, 4), -3.0, np.float16))
    with pytest.raises(sigdnn.VariantPackError, match="read-only"):
        ex.execute(plan, {"x": x, "b": b, "y": np.broadcast_to(out, out.shape)})


def test_workspace_is_the_largest_any_step_asks_for() -> None:
    """One workspace serves every step in turn: the plan asks for the largest (none without steps)."""
    plan = sigdnn.Executor().prepare(graph_with_every_kind())
    asks = [300, 4096, 0, 17]
    steps = tuple(attrs.evolve(s, plan=_Asks(n)) for s, n in zip(plan.steps, asks))
    assert ExecutionPlan(plan.graph, plan.backend, plan.digest, steps, plan.memory).workspace_bytes == 4096
    assert ExecutionPlan(plan.graph, plan.backend, plan.digest, (), plan.memory).workspace_bytes == 0


@attrs.frozen
class _Asks:
    """A step plan that only asks for workspace."""

    workspace_bytes: int
