"""Views into the caller's inputs on the GPU backends: a transpose or slice of an input runs no step.

The GPU memory takes a caller's buffer only with the graph's declared
strides, so a reshape / transpose / slice of an input can be that buffer
seen through other strides (``plan.memory.input_views``), made anew each
run from whatever buffer the caller passes. Checked on both GPU memory
paths over host memory with emulated kernels: the bound plan
(``host_gpu_executor``, which rebinds when a caller's buffer moves) and the
generic path (``emulated_executor``, and capture for validation).
"""

from __future__ import annotations

import numpy as np
import pytest
from emulated import emulated_executor, host_gpu_executor, make_available

import sigdnn
from sigdnn.graph.views import view_layout
from sigdnn.validation import random_inputs


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def transposed_input(rows: int = 64, cols: int = 48) -> sigdnn.Graph:
    """y = exp(x^T) + 1 with x the caller's: the transpose a view of x, the pointwise reading it strided."""
    g = sigdnn.Graph("t", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (rows, cols))
    t = view_layout(g, g.transpose(x, (1, 0), name="t"))
    g.pointwise("add", g.exp(t), g.scalar("one", 1.0), name="add").set_output(True).set_name("y")
    return g


def sliced_input(start: int) -> sigdnn.Graph:
    """y = -x[start : start + 32] with x [128, 64] the caller's."""
    g = sigdnn.Graph("s", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (128, 64))
    s = view_layout(g, g.slice(x, [slice(start, start + 32), slice(0, 64)], name="s"))
    g.neg(s, name="neg").set_output(True).set_name("y")
    return g


def builders(plan: sigdnn.ExecutionPlan) -> dict[str, str]:
    return {s.name: s.builder.name for s in plan.steps}


def test_a_transposed_input_is_a_view_and_its_reader_gets_the_callers_buffer_each_run():
    g = transposed_input()
    ex = host_gpu_executor(fusion=True)
    plan = ex.prepare(g)
    t, x = g.node_by_name("t").op.outputs()["y"], g.tensor_by_name("x").uid
    assert builders(plan)["t"] == "view" and plan.memory.input_views == {t: (x, 0)}
    assert t not in plan.memory.offsets  # no arena bytes
    for seed in (1, 2):  # a new caller buffer each run: the view moves with it
        data = random_inputs(g, seed=seed)
        want = np.exp(data["x"].T.astype(np.float64)) + 1
        np.testing.assert_allclose(ex.execute(plan, data)["y"], want, rtol=1e-6)


def test_the_generic_path_and_validation_see_the_same_view():
    g = transposed_input(40, 72)
    ex = emulated_executor(fusion=True)
    assert builders(ex.prepare(g))["t"] == "view"
    report = sigdnn.validate(g, executor=ex)
    assert report.passed, report.table()


@pytest.mark.parametrize("start", [64, 1])
def test_a_slice_of_an_input_at_whole_rows_is_a_view(start: int):
    """Rows of 64 float32 are 256 bytes: any row offset keeps the alignment."""
    g = sliced_input(start)
    ex = host_gpu_executor(fusion=True)
    plan = ex.prepare(g)
    assert builders(plan)["s"] == "view"
    assert plan.memory.input_views == {g.node_by_name("s").op.outputs()["y"]: (g.tensor_by_name("x").uid, start * 256)}
    data = random_inputs(g, seed=3)
    np.testing.assert_array_equal(ex.execute(plan, data)["y"], -data["x"][start : start + 32])


def test_a_column_slice_off_256_bytes_is_a_copy():
    g = sigdnn.Graph("c", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (16, 64))
    s = view_layout(g, g.slice(x, [slice(0, 16), slice(3, 35)], name="s"))  # starts 12 bytes in
    g.neg(s, name="neg").set_output(True).set_name("y")
    ex = host_gpu_executor(fusion=True)
    plan = ex.prepare(g)
    assert builders(plan)["s"] != "view" and not plan.memory.input_views
    data = random_inputs(g, seed=4)
    np.testing.assert_array_equal(ex.execute(plan, data)["y"], -data["x"][:, 3:35])


def test_the_reference_backend_copies_a_transposed_input():
    """The reference takes a caller's array with any strides: a view by the declared strides would misread it."""
    g = transposed_input()
    plan = sigdnn.Executor("reference", fusion=True).prepare(g)
    assert builders(plan)["t"] == "reference.transpose" and not plan.memory.input_views


def test_a_callers_output_is_never_aliased():
    g = sigdnn.Graph("o", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (64, 64))
    a = g.neg(x, name="a").set_output(True).set_name("a")
    t = view_layout(g, g.transpose(a, (1, 0), name="t"))
    g.neg(t, name="b").set_output(True).set_name("b")
    plan = host_gpu_executor(fusion=True).prepare(g)
    assert builders(plan)["t"] != "view" and not plan.memory.input_views
