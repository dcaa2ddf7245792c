"""Executor("gpu", fallback="reference"): nodes no GPU builder takes run on the reference, and say so."""

from __future__ import annotations

import pytest
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.errors import NoPlanError, UsageError
from sigdnn.plan_builders.cutile import matmul as cutile_matmul


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    # matmul stands for a node the GPU builders do not take: the cuTile matmul is kept out (here and on a GPU)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: "left out of this test")


def mlp() -> sigdnn.Graph:
    g = sigdnn.Graph("mlp", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(8, 16))
    w = g.tensor("w", dims=(16, 16))
    y = g.pointwise("gelu_fwd", g.matmul(x, w, name="mm"), name="act")
    y.set_output(True).set_name("y")
    return g


def test_strict_by_default():
    with pytest.raises(NoPlanError, match=r"node 'mm'.*cutile\.matmul \(#2030\): unavailable"):
        emulated_executor().prepare(mlp())


def test_fallback_names_the_node_and_why():
    ex = emulated_executor(fallback="reference")
    plan = ex.prepare(mlp())
    by_name = {s.name: s for s in plan.steps}
    assert by_name["mm"].builder.name == "reference.matmul (fallback)"
    assert "cutile.matmul (#2030): unavailable" in by_name["mm"].declines[0]
    assert by_name["act"].builder.name == "cutile.pointwise"
    assert "reference.matmul (fallback)" in plan.describe()
    assert plan.as_dict()["steps"][0]["declines"]
    report = sigdnn.validate(mlp(), executor=ex)
    assert report.passed, report.table()
    assert report.builders == {"mm": "reference.matmul (fallback)", "act": "cutile.pointwise"}


def test_pinned_nodes_never_fall_back():
    ex = emulated_executor(fallback="reference", pins={"mm": "cutile.pointwise"})
    with pytest.raises(NoPlanError, match=r"pinned builder cutile\.pointwise"):
        ex.prepare(mlp())


def test_fallback_is_a_gpu_option():
    with pytest.raises(UsageError, match="fallback"):
        sigdnn.Executor("reference", fallback="reference")
    with pytest.raises(UsageError, match="fallback"):
        sigdnn.Executor("gpu", fallback="cpu")
