"""Nodes with several outputs, some optional, through prepare, execute, inspect and validate.

A virtual output nobody reads still gets memory (the node writes it); an
absent optional output gets none and no key entry; describe() lists every
output; validation judges every output of every step.
"""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn


def layernorm_mlp() -> sigdnn.Graph:
    g = sigdnn.Graph("ln_mlp", io_dtype="float32", intermediate_dtype="float32")
    x, s, b = g.tensor("x", (4, 16)), g.tensor("s", (1, 16)), g.tensor("b", (1, 16))
    y, _, inv = g.layernorm("training", x, s, b, name="ln")  # its mean: virtual, read by nobody
    inv.set_output(True).set_name("inv")
    h = g.matmul(y, g.tensor("w", (16, 8)), name="fc")
    z, stats = g.softmax(h, generate_stats=False, name="sm")
    assert stats is None
    z.set_output(True).set_name("z")
    return g


def test_unread_virtual_output_is_allocated_and_absent_output_is_not() -> None:
    g = layernorm_mlp()
    plan = sigdnn.Executor().prepare(g)
    mean = g.tensor_by_name("ln::mean")
    assert mean.uid in plan.memory.offsets  # written by the node, so it needs room
    step = next(s for s in plan.steps if s.name == "ln")
    assert set(step.bindings) == {"x", "scale", "bias", "y", "mean", "inv_variance"}
    sm = next(s for s in plan.steps if s.name == "sm")
    assert set(sm.bindings) == {"x", "y"} and [p for p, _ in sm.keys[0].outputs] == ["y"]
    virtual = [t.uid for t in g.tensors.values() if t.is_virtual]
    assert set(plan.memory.offsets) == set(virtual)  # every virtual tensor a node writes, and only those


def test_multi_output_values_and_describe() -> None:
    torch = pytest.importorskip("torch")
    g = layernorm_mlp()
    rng = np.random.default_rng(0)
    inputs = {n: rng.standard_normal(g.tensor_by_name(n).dims).astype(np.float32) for n in ("x", "s", "b", "w")}
    out = sigdnn.Executor().run(g, inputs)
    assert set(out) == {"inv", "z"}
    x = torch.tensor(inputs["x"], dtype=torch.float64)
    inv = 1 / torch.sqrt(x.var(dim=1, unbiased=False, keepdim=True) + 1e-5)
    np.testing.assert_array_equal(out["inv"], inv.numpy().astype(np.float32))
    described = sigdnn.Executor().prepare(g).describe()
    assert "Layernorm[training](f32,f32,f32->f32,f32,f32; f32)" in described
    assert "Softmax[log=False](f32->f32; f32)" in described
    for name in ("ln::y", "ln::mean", "inv", "z"):
        assert name in described


def test_validate_judges_every_output_of_every_new_op() -> None:
    """Reference against reference: every step's every output is compared (and agrees exactly)."""
    g = sigdnn.Graph("all", io_dtype="float32", intermediate_dtype="float32")
    x, s, b = g.tensor("x", (2, 3, 4, 4)), g.tensor("s", (1, 3, 1, 1)), g.tensor("b", (1, 3, 1, 1))
    y, mean, inv, _, _ = g.batchnorm(x, s, b, name="bn")
    dx, dscale, dbias = g.batchnorm_backward(y, x, s, mean, inv, name="bn_bwd")
    p = g.pooling(dx, "average_count_exclude_pad", (2, 2), padding=(1, 1), name="pool")
    r = g.reduction(p, "add", (2, 1, 1, 1), name="sum")
    for t, name in ((r, "r"), (dscale, "dscale"), (dbias, "dbias")):
        t.set_output(True).set_name(name)
    report = sigdnn.validate(g, backend="reference")
    judged = {c.comparison.name for c in report.nodes}
    assert {"bn::y", "bn::mean", "bn::inv_variance", "bn_bwd::dx", "dscale", "dbias", "pool::y", "r"} <= judged
    assert report.passed
