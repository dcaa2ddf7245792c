"""Fusion of pointwise regions into one generated kernel, run on the CPU through the emulator.

Checks what the fusion builder claims (maximal, connected, convex, one
output shape per region), that a fused region computes exactly what its
nodes compute one by one (internal tensors are rounded to their declared
dtype in registers, as the reference stores them), that one kernel serves
every region of a pattern, and that validation catches planted kernel bugs.
"""

from __future__ import annotations

import numpy as np
import pytest
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.plan_builders.cutile import codegen
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.validation import random_inputs


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    # matmul stands for a node the GPU builders do not take: the cuTile matmul is kept out (here and on a GPU)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: "left out of this test")


def block(dtype: str = "bfloat16", dims=(4, 16, 9, 7), layout: str = "NCHW") -> sigdnn.Graph:
    """x + y, times a per-channel bias, relu, then tanh and a skip: two exits, one region."""
    g = sigdnn.Graph("block", io_dtype=dtype, intermediate_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", dims=dims, layout=layout)
    y = g.tensor("y", dims=dims, layout=layout)
    bias = g.tensor("bias", dims=(1, dims[1], 1, 1))
    r = g.pointwise("relu_fwd", g.pointwise("mul", g.pointwise("add", x, y, name="add"), bias, name="mul"), name="relu")
    g.pointwise("tanh_fwd", r, name="tanh").set_output(True).set_name("out")
    g.pointwise("add", r, x, name="skip").set_output(True).set_name("skip_out")
    return g


def run(g: sigdnn.Graph, data, **kw):
    ex = emulated_executor(**kw)
    plan = ex.prepare(g)
    return plan, ex.execute(plan, data)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_region_is_one_step_and_matches_the_nodes_bit_for_bit(dtype, layout):
    g = block(dtype, layout=layout)
    data = random_inputs(g, seed=1)
    plan, fused = run(g, data)
    assert len(plan.steps) == 1 and plan.steps[0].builder.name == "cutile.fusion.pointwise"
    region = plan.steps[0].region
    assert len(region.nodes) == 5 and len(region.exits) == 2
    assert not set(region.internal) & set(plan.memory.offsets)  # internal tensors take no memory
    _, unfused = run(g, data, fusion=False)
    for name in ("out", "skip_out"):
        assert np.array_equal(fused[name].view(np.uint8), unfused[name].view(np.uint8)), name
    report = sigdnn.validate(g, data, executor=emulated_executor())
    assert report.passed, report.table()
    assert "region of 5 nodes" in plan.describe()


def test_regions_split_by_output_shape_and_at_other_ops():
    g = sigdnn.Graph("mixed", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(8, 32))
    w = g.tensor("w", dims=(32, 32))
    b1 = g.tensor("b1", dims=(1, 32))
    b2 = g.tensor("b2", dims=(1, 32))
    scale = g.pointwise("sigmoid_fwd", g.pointwise("add", b1, b2, name="bsum"), name="bsig")  # (1, 32): own region
    h = g.pointwise("gelu_fwd", g.pointwise("mul", x, scale, name="scale"), name="gelu")
    m = g.matmul(h, w, name="mm")
    z = g.pointwise("add", g.pointwise("exp", m, name="exp"), h, name="res")  # h is read across the matmul
    z.set_output(True).set_name("z")
    ex = emulated_executor(fallback="reference")
    plan = ex.prepare(g)
    regions = [[n.name for n in s.nodes] for s in plan.steps if s.region is not None]
    assert ["bsum", "bsig"] in regions
    assert ["scale", "gelu"] in regions
    assert ["exp", "res"] in regions
    [mm] = [s for s in plan.steps if s.region is None]
    assert mm.name == "mm" and mm.builder.name == "reference.matmul (fallback)"
    assert "cutile.matmul (#2030): unavailable" in mm.declines[0]
    report = sigdnn.validate(g, executor=ex)
    assert report.passed, report.table()
    assert report.builders["mm"] == "reference.matmul (fallback)"


def test_a_region_never_straddles_a_node_it_cannot_take():
    """a -> matmul -> c with a -> c directly: {a, c} would not be convex (a path leaves and re-enters)."""
    g = sigdnn.Graph("convex", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(16, 16))
    a = g.pointwise("exp", x, name="a")
    m = g.matmul(a, x, name="mm")
    c = g.pointwise("add", m, a, name="c")
    c.set_output(True).set_name("c")
    plan = emulated_executor(fallback="reference").prepare(g)
    assert [s.region for s in plan.steps] == [None, None, None]


def test_one_kernel_per_pattern():
    g = sigdnn.Graph("twice", io_dtype="float16", intermediate_dtype="float16", compute_dtype="float32")
    x = g.tensor("x", dims=(64, 48))
    first = g.pointwise("relu_fwd", g.pointwise("add", x, x, name="a1"), name="r1")
    m = g.matmul(first, g.tensor("w", dims=(48, 48)), name="mm")
    second = g.pointwise("relu_fwd", g.pointwise("add", m, m, name="a2"), name="r2")
    second.set_output(True).set_name("y")
    ex = emulated_executor(fallback="reference")
    plan = ex.prepare(g)
    assert len(plan.regions) == 2
    assert plan.regions[0].plan.launch.kernel is plan.regions[1].plan.launch.kernel
    assert sigdnn.validate(g, executor=ex).passed


def test_bool_and_scalar_inside_a_region():
    g = sigdnn.Graph("select", io_dtype="bfloat16", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(3, 1000), layout="ROW_MAJOR")
    s = g.scalar("s", 0.25)
    mask = g.pointwise("cmp_gt", x, s, name="cmp").set_data_type("bool")
    y = g.pointwise("binary_select", g.pointwise("gelu_fwd", x, name="gelu"), g.pointwise("neg", x, name="neg"), mask)
    y.set_output(True).set_name("y")
    ex = emulated_executor()
    plan = ex.prepare(g)
    assert len(plan.steps) == 1
    report = sigdnn.validate(g, executor=ex)
    assert report.passed, report.table()


# ---------------------------------------------------------------------------
# Planted bugs: each must make validation fail.


def _plant(monkeypatch, what: str) -> None:
    if what == "off-by-one index":  # the bias read one channel over
        original = codegen.generate
        monkeypatch.setattr(
            codegen, "generate", lambda spec: original(spec).replace("c1 = cq2 % 16", "c1 = cq2 % 16 + 1")
        )
    elif what == "tanh at bfloat16 precision":
        monkeypatch.setitem(
            codegen.FLOAT_MODES,
            "tanh_fwd",
            lambda a, n: (f"ct.astype(ct.astype(ct.tanh({a[0]}), ct.bfloat16), ct.float32)", "f"),
        )
    elif what == "relu threshold epsilon":
        monkeypatch.setitem(
            codegen.FLOAT_MODES, "relu_fwd", lambda a, n: (f"ct.where({a[0]} <= 1e-3, 0.0, {a[0]})", "f")
        )


@pytest.mark.parametrize("what", ["off-by-one index", "tanh at bfloat16 precision", "relu threshold epsilon"])
def test_validation_catches_planted_kernel_bugs(monkeypatch, what):
    g = block("float32")
    data = random_inputs(g, seed=2)
    data["x"][0, 0, 0, :] = np.linspace(1e-4, 5e-4, 7, dtype=np.float32)  # where the threshold bug bites
    data["y"][0, 0, 0, :] = 0.0
    data["bias"][...] = np.abs(data["bias"]) + 0.1
    assert sigdnn.validate(g, data, executor=emulated_executor()).passed  # the data is fine without the bug
    _plant(monkeypatch, what)
    report = sigdnn.validate(g, data, executor=emulated_executor())
    assert not report.passed, f"{what} went unnoticed"
