"""Views on the GPU executor's bound path (GpuMemory, BoundPlan) with emulated cuTile kernels.

A head split and merge declared as views, a concatenate whose producers
write into their slices, and a copy the executor cannot make a view, run
through ``Executor("gpu")`` on a host-backed context: the view steps launch
nothing (the binding leaves them out), the copies run ``cutile.movement``,
and the results equal the reference's, on repeated runs too.
"""

from __future__ import annotations

import numpy as np
import pytest
from emulated import host_gpu_executor, make_available

import sigdnn
from sigdnn.graph.views import view_layout
from sigdnn.validation import random_inputs


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def heads_and_pieces() -> sigdnn.Graph:
    g = sigdnn.Graph("views", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (2, 4, 128))
    a = g.neg(x)
    heads = view_layout(g, g.transpose(view_layout(g, g.reshape(a, (2, 4, 2, 64))), (0, 2, 1, 3), name="heads"))
    tokens = view_layout(g, g.transpose(g.exp(heads), (0, 2, 1, 3), name="tokens"))
    g.abs(view_layout(g, g.reshape(tokens, (2, 4, 128), name="merge"))).set_output(True).set_name("merged")
    p, q = g.neg(x), g.exp(x)
    cat = g.concatenate([p, q], 0, name="cat")
    for piece in (p, q):
        piece.set_stride(cat.strides)
    g.abs(cat).set_output(True).set_name("joined")
    g.transpose(a, (2, 1, 0), name="copy").set_output(True).set_name("copied")  # an output: never a view
    return g


def test_view_steps_launch_nothing_and_the_results_are_the_references() -> None:
    g = heads_and_pieces()
    executor = host_gpu_executor()
    plan = executor.prepare(g)
    builders = {s.name: s.builder.name for s in plan.steps}
    assert [builders[n] for n in ("heads", "tokens", "merge", "cat")] == ["view"] * 4
    assert builders["copy"] == "cutile.movement"
    bound = executor.memory.bound(plan, False)
    assert len(bound._launches) == len(plan.steps) - sum(s.builder.name == "view" for s in plan.steps)
    for seed in (1, 2):
        inputs = random_inputs(g, seed=seed)
        got = executor.execute(plan, inputs)
        for name, want in sigdnn.Executor().run(g, inputs).items():
            np.testing.assert_array_equal(got[name], want, err_msg=name)
