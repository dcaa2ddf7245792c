"""Validation's memory at model size: ``release`` drops what no later step reads, and changes no verdict.

A full-size model's bookkeeping (a float64 bound per element of every tensor)
would not fit beside it; with ``release`` compare_steps and the spread's
perturbed runs keep a tensor's arrays only while a later step reads it, and
the graph outputs always.
"""

from __future__ import annotations

import numpy as np

import sigdnn
from sigdnn.accuracy import spread
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.runtime.device import ExecutionContext
from sigdnn.validation.checks import compare_steps
from sigdnn.validation.truth import truth_executor


def graph() -> sigdnn.Graph:
    """A chain with a branch: t is read two steps on, u is an output read later too."""
    g = sigdnn.Graph("chain", io_dtype="float32", compute_dtype="float32")
    x, w = g.tensor("x", (8, 16)), g.tensor("w", (16, 16))
    t = g.matmul(x, w, name="mm")
    u = g.pointwise("relu_fwd", t, name="relu")
    u.set_output(True).set_name("u")
    v = g.pointwise("tanh_fwd", u, name="tanh")
    g.pointwise("add", v, t, name="residual").set_output(True).set_name("y")
    return g


def test_compare_steps_keeps_only_the_outputs_and_judges_the_same() -> None:
    g = graph()
    data = random_inputs(g, 0)
    reference = truth_executor("cpu")
    plan = reference.prepare(g)
    device = sigdnn.Executor("reference", fusion=False)
    device_plan = device.prepare(g)
    captured: dict[str, np.ndarray] = {}
    device.execute(device_plan, data, capture=captured)
    results = {}
    for release in (False, True):
        seen = {**data, **captured}
        sums: dict = {}
        carried: dict = {}
        checks = compare_steps(g, plan, device_plan, seen, sums, None, carried, release=release)
        results[release] = (repr(checks), {u: sums[u].tobytes() for u in sums if u in (o.uid for o in g.outputs)})
        if release:
            outputs = {t.uid for t in g.outputs}
            assert set(seen) == {"u", "y"} and set(sums) == set(carried) == outputs
        else:
            assert set(seen) == {"x", "w", "mm::c", "u", "tanh::out_0", "y"} and len(carried) == 4
    assert results[False] == results[True]
    seen = {**data, **captured}
    compare_steps(g, plan, device_plan, seen)  # a caller's dict is left alone unless it asks for release
    assert seen == {**data, **captured}


def test_a_perturbed_run_keeps_only_the_outputs_and_draws_the_same() -> None:
    g = graph()
    data = random_inputs(g, 1)
    reference = truth_executor("cpu")
    plan = reference.prepare(g)
    whole = spread.perturbed_run(g, plan, data, ExecutionContext(), 3)
    kept = spread.perturbed_run(g, plan, data, ExecutionContext(), 3, release=True)
    assert set(kept) == {t.uid for t in g.outputs} and len(whole) == 6
    for uid, value in kept.items():
        assert np.array_equal(value, whole[uid])
