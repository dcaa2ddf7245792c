"""The cuTile matmul on the GPU, judged against the float64 reference; its disk cache; measured choice vs CuTe.

Shapes are awkward (M, N, K not multiples of any tile), batches broadcast and
fold, operands are column-major or strided along neither dim, float32 runs
exact and as TF32, epilogues fuse bias, activation and residual. One output
is pre-filled with NaN so an element never written cannot pass. Skipped
(with the reason) where cuTile or a GPU is missing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.tolerances import step_tolerance
from sigdnn.executor.autotune import Tuner, TuningCache
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.validation import compare, random_inputs

pytestmark = pytest.mark.gpu

SHAPES = {
    # name: (a dims, b dims, io dtype, out dtype, compute, a strides, b strides, c strides)
    "tails": ((333, 264), (264, 520), "bfloat16", None, "float32", None, None, None),
    "batched_f16_f32_out": ((3, 200, 136), (3, 136, 72), "float16", "float32", "float32", None, None, None),
    "x_at_w": ((2, 5, 100, 64), (64, 48), "bfloat16", None, "float32", None, None, None),
    "shared_a": ((100, 64), (4, 64, 200), "float16", None, "float32", None, None, None),
    "a_col_major": ((300, 200), (200, 136), "bfloat16", None, "float32", (1, 304), None, None),
    "b_col_major_odd_k": ((129, 201), (201, 136), "float16", None, "float32", None, (1, 201), None),
    "c_col_major": ((136, 72), (72, 264), "bfloat16", "float32", "float32", None, None, (1, 136)),
    "no_contiguous_dim": ((64, 40), (40, 96), "bfloat16", None, "float32", (80, 2), None, None),
    "float32_exact": ((257, 130), (130, 99), "float32", None, "float32", None, None, None),
    "float32_as_tf32": ((257, 130), (130, 99), "float32", None, "bfloat16", None, None, None),
    "deep_k": ((64, 4104), (4104, 96), "bfloat16", "float32", "float32", None, None, None),
}


def matmul_graph(a_dims, b_dims, dtype, out, compute, a_st=None, b_st=None, c_st=None) -> sigdnn.Graph:
    g = sigdnn.Graph("mm", io_dtype=dtype, compute_dtype=compute)
    c = g.matmul(g.tensor("a", a_dims, a_st), g.tensor("b", b_dims, b_st), name="mm").set_output(True).set_name("c")
    if out:
        c.set_data_type(out)
    if c_st:
        c.set_stride(c_st)
    return g


@pytest.mark.parametrize("name", list(SHAPES))
def test_validates_against_the_reference(name):
    g = matmul_graph(*SHAPES[name])
    report = sigdnn.validate(g, seed=3, executor=sigdnn.Executor("gpu", engine="cutile.matmul"))
    print(report.table())
    assert report.builders == {"mm": "cutile.matmul"}
    assert report.passed, report.table()


WRITES = [
    (name, config)
    for name in ("tails", "batched_f16_f32_out", "c_col_major")
    for config in (cutile_matmul.CONFIGS[0].label, "128x128x64g8", "256x128x64g8c2", "256x256x64g8c2w8p",
                   "128x128x64g8p", "64x128x64g8s5", "128x128x64g8s3", "128x128x64g8s2")
    # split-K runs unbatched GEMMs into at most their K steps (declined otherwise)
    if cutile_matmul.parse_config(config).split_k == 1
    or (not name.startswith("batched") and cutile_matmul.parse_config(config).split_k <= -(-SHAPES[name][0][-1] // 64))
]  # fmt: skip


@pytest.mark.parametrize(("name", "config"), WRITES)
def test_writes_every_element(name, config, monkeypatch):
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (cutile_matmul.parse_config(config),))
    monkeypatch.setattr(cutile_matmul, "split_config", lambda base, views, sms: base)  # the config as written
    monkeypatch.setattr(cutile_matmul, "resident_blocks", lambda device, config: 2)  # persistent: 2 blocks walk all
    g = matmul_graph(*SHAPES[name])
    inputs = random_inputs(g, seed=5)
    out_t = g.tensor_by_name("c")
    span = sum((d - 1) * s for d, s in zip(out_t.dims, out_t.strides, strict=True)) + 1
    storage = torch.full((span,), float("nan"), dtype=getattr(torch, str(g.dtype_of(out_t))), device="cuda")
    out = torch.as_strided(storage, out_t.dims, out_t.strides)
    ex = sigdnn.Executor("gpu", engine="cutile.matmul")
    plan = ex.prepare(g)
    assert plan.steps[0].plan.config.label == config
    ex.execute(plan, {**inputs, "c": out}, to_host=False)
    got = out.float().cpu().numpy().astype(np.float64)
    want = sigdnn.Executor("reference").run(g, inputs)["c"]
    terms = np.matmul(np.abs(inputs["a"].astype(np.float64)), np.abs(inputs["b"].astype(np.float64)))
    result = compare("c", got, want, step_tolerance(g, list(g.nodes), out_t.uid), np.broadcast_to(terms, out_t.dims))
    assert result.passed, result


def epilogue_graph(steps, dtype="bfloat16", mid=None, a_dims=(2, 200, 136), b_dims=(136, 264)) -> sigdnn.Graph:
    g = sigdnn.Graph("epi", io_dtype=dtype, intermediate_dtype=mid, compute_dtype="float32")
    y = g.matmul(g.tensor("a", a_dims), g.tensor("b", b_dims), name="mm")
    out_dims = (*a_dims[:-1], b_dims[-1])
    for k, step in enumerate(steps):
        if step == "bias":
            y = g.pointwise("add", y, g.tensor(f"bias{k}", (1, out_dims[-1])), name=f"s{k}")
        elif step == "residual":
            y = g.pointwise("add", g.tensor(f"res{k}", out_dims), y, name=f"s{k}")
        else:
            y = g.pointwise(step, y, name=f"s{k}")
    y.set_output(True).set_name("out")
    return g


@pytest.mark.parametrize(
    "steps, mid",
    [(["bias", "gelu_fwd"], None), (["bias", "gelu_fwd"], "bfloat16"), (["bias", "relu_fwd", "residual"], "bfloat16"),
     (["residual", "gelu_approx_tanh_fwd"], "float16")],
)  # fmt: skip
@pytest.mark.parametrize("config", [None, "128x128x64g8"])
def test_fused_epilogue_validates(steps, mid, config, monkeypatch):
    if config:
        monkeypatch.setattr(cutile_matmul, "CONFIGS", (cutile_matmul.parse_config(config),))
    monkeypatch.setattr(cutile_matmul, "resident_blocks", lambda device, config: 2)  # the persistent default's
    monkeypatch.setattr(cutile_matmul, "split_config", lambda base, views, sms: base)  # the config as written
    g = epilogue_graph(steps, mid=mid)  # 2 blocks each walk 4 of the 4 x 2 tiles of 128 x 256 (the batch folds)
    ex = sigdnn.Executor("gpu", engine="cutile.matmul")
    plan = ex.prepare(g)
    assert len(plan.steps) == 1 and plan.steps[0].builder.name == "cutile.matmul"
    assert plan.steps[0].plan.grid[0] == (12 if config else 2)  # 128 x 128: 4 x 3 tiles, one a block
    report = sigdnn.validate(g, seed=9, executor=ex)
    print(report.table())
    assert report.passed, report.table()


@pytest.mark.parametrize(
    ("a_dims", "b_dims", "dtype", "compute", "steps"),
    [((1, 4096), (4096, 1000), "float32", "bfloat16", ["bias"]),  # a batch-1 classifier, TF32: 8 tiles, 16 splits
     ((197, 3072), (3072, 768), "bfloat16", "float32", ["bias", "gelu_fwd"])],  # a ViT MLP GEMM: 12 tiles, 11 splits
)  # fmt: skip
def test_few_output_tiles_split_k_by_default_and_validate(a_dims, b_dims, dtype, compute, steps):
    g = sigdnn.Graph("few", io_dtype=dtype, compute_dtype=compute)
    y = g.matmul(g.tensor("a", a_dims), g.tensor("b", b_dims), name="mm")
    for k, step in enumerate(steps):
        other = (g.tensor(f"bias{k}", (1, b_dims[-1])),) if step == "bias" else ()
        y = g.pointwise("add" if other else step, y, *other, name=f"s{k}")
    y.set_output(True).set_name("out")
    ex = sigdnn.Executor("gpu", engine="cutile.matmul")
    assert ex.prepare(g).steps[0].plan.config.split_k > 1
    report = sigdnn.validate(g, seed=2, executor=ex)
    assert report.passed, report.table()


COMPILES = textwrap.dedent(
    """
    import sigdnn
    from cuda.tile import _compile
    calls = []
    original = _compile.compile_cubin
    _compile.compile_cubin = lambda *a, **k: calls.append(1) or original(*a, **k)
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    y = g.matmul(g.tensor("a", (72, 40)), g.tensor("b", (40, 24)), name="mm")
    g.pointwise("gelu_fwd", g.pointwise("add", y, g.tensor("bias", (1, 24)))).set_output(True).set_name("c")
    report = sigdnn.validate(g, seed=1, executor=sigdnn.Executor("gpu", engine="cutile.matmul"))
    print(report.passed, len(calls))
    """
)


def test_second_process_does_not_recompile(tmp_path):
    env = {**os.environ, "SIGDNN_CACHE_DIR": str(tmp_path), "CUDA_TILE_CACHE_DIR": str(tmp_path / "cutile-python")}
    runs = [subprocess.run([sys.executable, "-c", COMPILES], env=env, capture_output=True, text=True, check=False)
            for _ in range(2)]  # fmt: skip
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    first, second = (r.stdout.split()[-2:] for r in runs)
    assert first[0] == "True" and int(first[1]) >= 1, runs[0].stdout
    assert second == ["True", "0"], runs[1].stdout


CHOICE = textwrap.dedent(
    """
    import sys, torch, sigdnn
    from sigdnn.executor.autotune import Tuner
    def refuse(label, run, sync):
        raise AssertionError("timed " + label)
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    g.matmul(g.tensor("a", (2048, 2048)), g.tensor("b", (2048, 2048)), name="mm").set_output(True).set_name("c")
    t = Tuner(measure=False, timer=refuse)
    plan = sigdnn.Executor("gpu", autotune=t).prepare(g)
    print(plan.steps[0].builder.name, t.measured, plan.steps[0].choice)
    """
)


def test_autotune_runs_the_faster_of_cutile_and_cute_and_a_second_process_reuses_it(tmp_path):
    from sigdnn.plan_builders.cute import unavailable_reason

    if unavailable_reason() is not None:
        pytest.skip(f"needs the CuTe DSL too: {unavailable_reason()}")
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    g.matmul(g.tensor("a", (2048, 2048)), g.tensor("b", (2048, 2048)), name="mm").set_output(True).set_name("c")
    tuner = Tuner(cache=TuningCache(tmp_path / "autotune.json"))
    plan = sigdnn.Executor("gpu", autotune=tuner).prepare(g)
    step = plan.steps[0]
    print(plan.describe())
    assert step.choice.startswith("measured:")
    (record,) = json.loads((tmp_path / "autotune.json").read_text()).values()
    timed = {label: seconds for label, seconds, _ in record["trials"] if seconds is not None}
    assert any(x.startswith("cute.matmul") for x in timed) and any(x.startswith("cutile.matmul") for x in timed)
    assert record["label"] == min(timed, key=timed.__getitem__)
    assert step.builder.name == record["label"].split("[")[0]
    env = {**os.environ, "SIGDNN_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", CHOICE], env=env, capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr[-3000:]
    name, measured, choice = r.stdout.strip().split(" ", 2)
    assert (name, measured) == (step.builder.name, "0")
    assert choice.startswith("cached: ") and choice.split(" ")[1] == step.choice.split(" ")[1]


@pytest.mark.parametrize(("a_dt", "b_dt", "compute"), [("float32", "bfloat16", "float32"),
                                                       ("float16", "bfloat16", "float32"),
                                                       ("bfloat16", "float32", "bfloat16")])  # fmt: skip
def test_operands_of_two_dtypes_validate(a_dt: str, b_dt: str, compute: str) -> None:
    """float32 activations x bf16 weights (the transformer example's projections), f16 x bf16: both tiles widen
    to float32 in the kernel (exact products, or TF32 with 16-bit compute)."""
    g = sigdnn.Graph("mixed", io_dtype="float32", compute_dtype=compute)
    a = g.tensor("a", (2, 257, 130)).set_data_type(a_dt)
    b = g.tensor("b", (130, 99), (1, 130)).set_data_type(b_dt)
    g.matmul(a, b, name="mm").set_output(True).set_name("c")
    report = sigdnn.validate(g, seed=3, executor=sigdnn.Executor("gpu", engine="cutile.matmul"))
    assert report.builders == {"mm": "cutile.matmul"}
    assert report.passed, report.table()
