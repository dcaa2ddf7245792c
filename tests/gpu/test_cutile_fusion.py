"""Fused pointwise regions, fallback and the bound executor path on the GPU."""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.plan_builders.cutile import codegen
from sigdnn.validation import random_inputs

pytestmark = pytest.mark.gpu


def block(dtype: str, dims=(4, 32, 33, 17), layout: str = "NCHW") -> sigdnn.Graph:
    g = sigdnn.Graph("block", io_dtype=dtype, intermediate_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", dims=dims, layout=layout)
    y = g.tensor("y", dims=dims, layout=layout)
    bias = g.tensor("bias", dims=(1, dims[1], 1, 1))
    r = g.pointwise("relu_fwd", g.pointwise("mul", g.pointwise("add", x, y, name="add"), bias, name="mul"), name="relu")
    g.pointwise("gelu_fwd", r, name="gelu").set_output(True).set_name("out")
    g.pointwise("add", r, x, name="skip").set_output(True).set_name("skip_out")
    return g


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_region_matches_reference_and_the_unfused_kernels(dtype, layout):
    g = block(dtype, layout=layout)
    data = random_inputs(g, seed=1)
    report = sigdnn.validate(g, data)
    assert report.builders == {"region(add..skip)": "cutile.fusion.pointwise"}, report.builders
    assert report.passed, report.table()
    fused = sigdnn.Executor("gpu").run(g, data)
    unfused = sigdnn.Executor("gpu", fusion=False).run(g, data)
    for name in ("out", "skip_out"):
        bits = [np.ascontiguousarray(r[name]).view(np.uint8) for r in (fused, unfused)]
        assert np.array_equal(*bits), name


def test_fallback_runs_what_no_gpu_builder_takes():
    """A conv that asks for float64 sums (every GPU conv builder sums in float32) falls back; its neighbours
    stay on the GPU."""
    g = sigdnn.Graph("float64_sums", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(2, 8, 6, 6), layout="NHWC")
    w = g.tensor("w", dims=(8, 8, 3, 3), layout="NHWC")
    b = g.tensor("b", dims=(1, 8, 1, 1))
    biased = g.pointwise("add", x, b, name="bias")
    s = g.conv_fprop(biased, w, padding=(1, 1), name="conv", compute_dtype="float64")
    y = g.pointwise("gelu_fwd", g.pointwise("mul", s, x, name="scale"), name="act")
    y.set_output(True).set_name("y")
    with pytest.raises(sigdnn.errors.NoPlanError, match="conv"):
        sigdnn.Executor("gpu").prepare(g)
    ex = sigdnn.Executor("gpu", fallback="reference")
    report = sigdnn.validate(g, seed=2, executor=ex)
    assert report.passed, report.table()
    assert report.builders["conv"] == "reference.conv_fprop (fallback)"
    assert report.builders["region(scale..act)"] == "cutile.fusion.pointwise"
    assert report.builders["bias"] == "cutile.pointwise"


def test_bound_plan_reuses_buffers_and_cuda_graphs_replay():
    torch = pytest.importorskip("torch")
    g = block("bfloat16", dims=(2, 16, 40, 40))
    ex = sigdnn.Executor("gpu", cuda_graphs=True, fusion=False)
    plan = ex.prepare(g)
    dev = {n: torch.randn(*t.dims, device="cuda").to(torch.bfloat16) for n, t in ((t.name, t) for t in g.inputs)}
    outs = {t.name: torch.empty(*t.dims, device="cuda", dtype=torch.bfloat16) for t in g.outputs}

    def want():
        host = {
            k: v.view(torch.int16).cpu().numpy().view(sigdnn.dtypes.DataType.BFLOAT16.numpy) for k, v in dev.items()
        }
        return sigdnn.Executor("gpu", fusion=False).run(g, host)

    def got():
        return {
            k: v.view(torch.int16).cpu().numpy().view(sigdnn.dtypes.DataType.BFLOAT16.numpy) for k, v in outs.items()
        }

    for _ in range(3):  # run, record, replay
        ex.execute(plan, {**dev, **outs}, to_host=False)
    bound = ex.memory.bound(plan, True)
    assert bound.recordings == 1
    for v in dev.values():  # new values in the same buffers: the replay must read them
        v.copy_(torch.randn_like(v, dtype=torch.float32).to(torch.bfloat16))
    ex.execute(plan, {**dev, **outs}, to_host=False)
    torch.cuda.synchronize()
    ref = want()
    for k, v in got().items():
        assert np.array_equal(v.view(np.uint16), ref[k].view(np.uint16)), k
    moved = {k: v.clone() for k, v in dev.items()}  # other addresses: a new recording, not a stale replay
    dev.update(moved)
    for _ in range(2):
        ex.execute(plan, {**dev, **outs}, to_host=False)
    assert bound.recordings == 2
    torch.cuda.synchronize()
    ref = want()
    for k, v in got().items():
        assert np.array_equal(v.view(np.uint16), ref[k].view(np.uint16)), k


@pytest.mark.parametrize("what", ["off-by-one index", "tanh at bfloat16 precision", "relu threshold epsilon"])
def test_validation_catches_planted_kernel_bugs(monkeypatch, what):
    from sigdnn.plan_builders.cutile.kernels import CUTILE

    g = sigdnn.Graph("planted", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(4, 16, 63))
    bias = g.tensor("bias", dims=(1, 16, 1))
    g.pointwise("tanh_fwd", g.pointwise("relu_fwd", g.pointwise("mul", x, bias))).set_output(True).set_name("y")
    data = random_inputs(g, seed=3)
    data["x"][0, 0, :7] = np.linspace(1e-4, 5e-4, 7, dtype=np.float32)
    data["bias"][...] = np.abs(data["bias"]) + 0.1
    assert sigdnn.validate(g, data).passed
    monkeypatch.setattr(CUTILE, "_kernels", {})  # kernels generated afresh, with the bug
    if what == "off-by-one index":
        original = codegen.generate
        monkeypatch.setattr(
            codegen, "generate", lambda spec: original(spec).replace("c1 = cq2 % 16", "c1 = cq2 % 16 + 1")
        )
    elif what == "tanh at bfloat16 precision":
        monkeypatch.setitem(codegen.FLOAT_MODES, "tanh_fwd",
                            lambda a, n: (f"ct.astype(ct.astype(ct.tanh({a[0]}), ct.bfloat16), ct.float32)", "f"))  # fmt: skip
    else:
        monkeypatch.setitem(
            codegen.FLOAT_MODES, "relu_fwd", lambda a, n: (f"ct.where({a[0]} <= 1e-3, 0.0, {a[0]})", "f")
        )
    assert not sigdnn.validate(g, data).passed, f"{what} went unnoticed"
