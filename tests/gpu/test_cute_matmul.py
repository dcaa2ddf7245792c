"""The CuTe DSL GEMM on a Hopper GPU, judged against the float64 reference.

Shapes are awkward on purpose: M, N and K not multiples of any tile,
batches (full, folded into M, shared A), column-major operands and output,
16- and 32-bit outputs. Every kernel configuration runs with its output
poisoned with NaN first, so an element it never wrote cannot pass.
Skips (with the reason) without a GPU, without nvidia-cutlass-dsl, or on a
device other than sm_90.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import zlib

import numpy as np
import pytest
from cute_skip import skip_unless_sm90

import sigdnn
from sigdnn.accuracy.tolerances import step_tolerance
from sigdnn.plan_builders.cute.matmul import CuteMatmulBuilder
from sigdnn.validation import compare, random_inputs

pytestmark = pytest.mark.gpu


skip_unless_sm90("the CuTe GEMM")


def matmul_graph(
    a_dims: tuple[int, ...],
    b_dims: tuple[int, ...],
    dtype: str,
    out_dtype: str,
    *,
    a_strides: tuple[int, ...] | None = None,
    b_strides: tuple[int, ...] | None = None,
    c_strides: tuple[int, ...] | None = None,
) -> sigdnn.Graph:
    g = sigdnn.Graph("mm", io_dtype=dtype, compute_dtype="float32")
    a = g.tensor("a", a_dims, a_strides)
    b = g.tensor("b", b_dims, b_strides)
    c = g.matmul(a, b, name="mm").set_output(True).set_name("c").set_data_type(out_dtype)
    if c_strides is not None:
        c.set_stride(c_strides)
    return g


SHAPES = {
    # name: (a dims, b dims, dtype, out dtype, a strides, b strides, c strides)
    "tails": ((333, 264), (264, 520), "bfloat16", "bfloat16", None, None, None),
    "batched_f32_out": ((3, 200, 136), (3, 136, 72), "float16", "float32", None, None, None),
    "x_at_w": ((2, 5, 100, 64), (64, 48), "bfloat16", "bfloat16", None, None, None),
    "shared_a": ((100, 64), (4, 64, 200), "float16", "float16", None, None, None),
    "a_col_major": ((300, 200), (200, 136), "bfloat16", "bfloat16", (1, 304), None, None),
    "b_col_major": ((129, 200), (200, 136), "float16", "bfloat16", None, (1, 200), None),
    "c_col_major": ((136, 72), (72, 264), "bfloat16", "float32", None, None, (1, 136)),
    "m_is_1": ((1, 256), (256, 64), "bfloat16", "bfloat16", None, None, None),
    "deep_k": ((64, 4104), (4104, 96), "float16", "float32", None, None, None),
}


@pytest.mark.parametrize("name", list(SHAPES))
def test_validates_against_the_reference(name: str) -> None:
    a_dims, b_dims, dt, out, a_st, b_st, c_st = SHAPES[name]
    g = matmul_graph(a_dims, b_dims, dt, out, a_strides=a_st, b_strides=b_st, c_strides=c_st)
    report = sigdnn.validate(g, seed=3, executor=sigdnn.Executor("gpu", engine="cute.matmul"))
    print(report.table())
    assert report.builders == {"mm": "cute.matmul"}
    assert report.passed, report.table()


CONFIGS = [
    "coop128x256c2x1s4n",  # the default for large problems
    "coop128x256c1x1s1",
    "coop128x256c2x1s1",
    "coop256x128c2x1s1",
    "coop128x128c1x2s4",
    "pp128x192c1x1s1",
    "pp128x128c2x1s1",
    "pp64x256c2x1s4n",
]


def run_poisoned(g: sigdnn.Graph, out_name: str, seed: int, executor: sigdnn.Executor) -> sigdnn.ExecutionPlan:
    """Run with the output pre-filled with NaN (in the graph's layout); judge it against the reference."""
    torch = pytest.importorskip("torch")
    inputs = random_inputs(g, seed=seed)
    out_t = g.tensor_by_name(out_name)
    plan = executor.prepare(g)
    torch_dt = getattr(torch, str(g.dtype_of(out_t)))
    span = sum((d - 1) * s for d, s in zip(out_t.dims, out_t.strides, strict=True)) + 1
    storage = torch.full((span,), float("nan"), dtype=torch_dt, device="cuda")
    out_dev = torch.as_strided(storage, out_t.dims, out_t.strides)
    executor.execute(plan, {**inputs, out_name: out_dev}, to_host=False)
    torch.cuda.synchronize()
    got = out_dev.float().cpu().numpy().astype(np.float64)
    reference = sigdnn.Executor("reference", fusion=False)
    want = reference.run(g, inputs)[out_name]
    # sum |terms| of the product, carried through the epilogue unchanged (as validate does)
    terms = np.matmul(np.abs(inputs["a"].astype(np.float64)), np.abs(inputs["b"].astype(np.float64)))
    tolerance = step_tolerance(g, list(g.nodes), out_t.uid)
    result = compare(out_name, got, want, tolerance, np.broadcast_to(terms, out_t.dims))
    assert result.passed, result
    return plan


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", ["tails", "batched_f32_out", "c_col_major"])
def test_every_config_writes_every_element(name: str, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    a_dims, b_dims, dt, out, a_st, b_st, c_st = SHAPES[name]
    g = matmul_graph(a_dims, b_dims, dt, out, a_strides=a_st, b_strides=b_st, c_strides=c_st)
    plan = run_poisoned(g, "c", zlib.crc32(f"{name}/{config}".encode()), sigdnn.Executor("gpu", engine="cute.matmul"))
    assert plan.steps[0].plan.config.label == config


def fused_graph(
    a_dims: tuple[int, ...], b_dims: tuple[int, ...], dtype: str, mid: str | None, bias: bool, act: str | None
) -> sigdnn.Graph:
    g = sigdnn.Graph("fused", io_dtype=dtype, intermediate_dtype=mid, compute_dtype="float32")
    y = g.matmul(g.tensor("a", a_dims), g.tensor("b", b_dims), name="mm")
    if bias:
        y = g.pointwise("add", y, g.tensor("bias", (1, b_dims[-1])), name="bias")
    if act:
        y = g.pointwise(act, y, name="act")
    y.set_output(True).set_name("out")
    return g


FUSED = {
    # name: (a dims, b dims, io dtype, intermediate dtype (None: float32), bias, activation)
    "bias_gelu": ((333, 264), (264, 520), "bfloat16", None, True, "gelu_fwd"),
    "bias_gelu_bf16_mid": ((333, 264), (264, 520), "bfloat16", "bfloat16", True, "gelu_fwd"),
    "relu_batched": ((3, 200, 136), (3, 136, 72), "float16", None, False, "relu_fwd"),
    "bias_gelu_tanh_x_at_w": ((2, 5, 100, 64), (64, 48), "float16", "float16", True, "gelu_approx_tanh_fwd"),
    "bias_only": ((129, 200), (200, 136), "bfloat16", None, True, None),
}


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_epilogue_validates(name: str) -> None:
    g = fused_graph(*FUSED[name])
    report = sigdnn.validate(g, seed=5, executor=sigdnn.Executor("gpu", engine="cute.matmul"))
    print(report.table())
    last = "act" if FUSED[name][5] else "bias"
    assert report.builders == {f"region(mm..{last})": "cute.matmul"}
    assert report.passed, report.table()


@pytest.mark.parametrize("config", ["coop128x256c2x1s4n", "pp128x192c1x1s1", "coop128x128c1x2s4", "pp64x256c2x1s4n"])
@pytest.mark.parametrize("name", ["bias_gelu_bf16_mid", "relu_batched"])
def test_fused_configs_write_every_element(name: str, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    g = fused_graph(*FUSED[name])
    plan = run_poisoned(g, "out", zlib.crc32(f"{name}/{config}".encode()), sigdnn.Executor("gpu", engine="cute.matmul"))
    assert len(plan.steps) == 1 and plan.steps[0].plan.config.label == config


def test_declines_what_tma_cannot_load() -> None:
    g = matmul_graph((64, 30), (30, 64), "bfloat16", "bfloat16")  # a's rows are 60 bytes apart
    builder = CuteMatmulBuilder()
    with pytest.raises(sigdnn.errors.NotSupported, match="16 bytes"):
        builder.check(g.node_by_name("mm"), g, None)


def test_second_process_loads_the_compiled_kernel_from_disk(tmp_path) -> None:
    """The on-disk cache: a fresh process finds the specialization without compiling it."""
    script = textwrap.dedent(
        """
        import numpy as np, sigdnn
        from sigdnn.plan_builders.cute.kernels import launch
        g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
        a = g.tensor("a", (72, 40)); b = g.tensor("b", (40, 24))
        g.matmul(a, b, name="mm").set_output(True).set_name("c")
        report = sigdnn.validate(g, seed=1, executor=sigdnn.Executor("gpu", engine="cute.matmul"))
        print(report.passed, launch.STATS["compiled"], launch.STATS["loaded"])
        """
    )
    env = {**os.environ, "SIGDNN_CUTE_CACHE": str(tmp_path)}
    env.pop("SIGDNN_CUTE_GEMM", None)
    runs = [
        subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False)
        for _ in range(2)
    ]
    for r in runs:
        assert r.returncode == 0, r.stderr[-3000:]
    first, second = (r.stdout.split()[-3:] for r in runs)
    assert first == ["True", "1", "0"], runs[0].stdout
    assert second == ["True", "0", "1"], runs[1].stdout


def test_plans_the_same_view_as_the_graph_strides() -> None:
    """A plan's scalars come from the graph: packed x @ W folds, column-major A keeps its ld."""
    g = matmul_graph((2, 5, 100, 64), (64, 48), "bfloat16", "bfloat16")
    spec, problem = CuteMatmulBuilder().plan(g.node_by_name("mm"), g)
    assert (problem.m, problem.batch) == (1000, 1)
    g = matmul_graph((300, 200), (200, 136), "bfloat16", "bfloat16", a_strides=(1, 304))
    spec, problem = CuteMatmulBuilder().plan(g.node_by_name("mm"), g)
    assert (spec.a_major, problem.lda) == ("m", 304)
