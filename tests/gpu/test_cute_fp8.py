"""The CuTe DSL fp8 GEMM on a Hopper GPU, judged against the float64 reference.

Graphs follow cuDNN-frontend's fp8 matmul: fp8 operands (A row-major, B
column-major: both contiguous along K, as wgmma needs), a float32 product,
multiplied by A's and B's per-tensor descale, then optionally a bias and
an activation, stored in bfloat16 / float16 / float32. Shapes are awkward
(M, N, K off every tile), mixed e4m3 / e5m2, batched, folded x @ W, and a
deep K with a float32 output.

The operands hold small integers (-4 ... 4, exact in both fp8 formats).
Hopper's fp8 wgmma sums each instruction's products with fewer bits than
float32 (docs/experiments.md, fp8 tensor-core accumulation: on values spread over
[-2, 2) it, and cuBLAS's fp8 GEMM alike, miss the float32-compute
tolerance), but on integers every partial sum here is exact, so the GEMM is
held to the reference's exact product and any wrong element, tile, scale
or epilogue step shows.

The descales are given values of magnitude at most 1 (as real descales
1 / amax-derived factors usually are): validation carries the GEMM's
sum-of-|terms| bound through elementwise nodes unchanged, so a scale above 1
would scale the accumulation error past the bound it is judged by.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from cute_skip import skip_unless_sm90

import sigdnn
from sigdnn.accuracy.tolerances import step_tolerance
from sigdnn.dtypes import round_to
from sigdnn.validation import compare, random_inputs

pytestmark = pytest.mark.gpu


skip_unless_sm90("the CuTe GEMM")

DESCALES = (0.5, -0.75)


def fp8_graph(
    a_dims: tuple[int, ...],
    b_dims: tuple[int, ...],
    a_dt: str,
    b_dt: str,
    out_dt: str,
    scales: int,
    bias: bool,
    act: str | None,
    scalar_scales: bool = False,
) -> sigdnn.Graph:
    g = sigdnn.Graph("fp8", io_dtype=out_dt, compute_dtype="float32", intermediate_dtype="float32")
    k, n = b_dims[-2:]
    b_strides = (*([k * n] if len(b_dims) == 3 else []), 1, k)  # column-major (K contiguous)
    y = g.matmul(g.tensor("a", a_dims, dtype=a_dt), g.tensor("b", b_dims, b_strides, dtype=b_dt), name="mm")
    for i in range(scales):
        if scalar_scales:
            s = g.scalar(f"descale{i}", DESCALES[i], dtype="float32")
        else:
            s = g.tensor(f"descale{i}", (1, 1, 1), dtype="float32")
        y = g.pointwise("mul", y, s, name=f"scale{i}")
    if bias:
        y = g.pointwise("add", y, g.tensor("bias", (1, n)), name="bias")
    if act:
        y = g.pointwise(act, y, name="act")
    y.set_output(True).set_name("out")
    return g


def fp8_inputs(g: sigdnn.Graph, seed: int) -> dict[str, np.ndarray]:
    inputs = random_inputs(g, seed=seed)
    rng = np.random.default_rng(seed)
    for name in ("a", "b"):
        dt = g.dtype_of(g.tensor_by_name(name))
        inputs[name] = round_to(rng.integers(-4, 5, size=inputs[name].shape).astype(np.float64), dt)
    for i, value in enumerate(DESCALES):
        if f"descale{i}" in inputs:
            inputs[f"descale{i}"] = np.full((1, 1, 1), value, np.float32)
    return inputs


CASES = {
    # name: (a dims, b dims, a dtype, b dtype, out dtype, scales, bias, activation, scales as graph scalars)
    "descaled_bf16": ((333, 272), (272, 520), "fp8_e4m3", "fp8_e4m3", "bfloat16", 2, False, None, False),
    "mixed_bias_gelu_f16": ((129, 208), (208, 136), "fp8_e4m3", "fp8_e5m2", "float16", 2, True, "gelu_fwd", False),
    "e5m2_x_e4m3_f32_plain": ((200, 144), (144, 72), "fp8_e5m2", "fp8_e4m3", "float32", 0, False, None, False),
    "batched_scalar_relu": ((3, 100, 64), (3, 64, 200), "fp8_e4m3", "fp8_e4m3", "bfloat16", 1, False, "relu_fwd", True),
    "x_at_w": ((2, 5, 100, 64), (64, 48), "fp8_e4m3", "fp8_e4m3", "bfloat16", 2, False, None, False),
    "deep_k_f32": ((64, 4112), (4112, 96), "fp8_e4m3", "fp8_e4m3", "float32", 1, False, None, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fp8_validates_against_the_reference(name: str) -> None:
    g = fp8_graph(*CASES[name])
    report = sigdnn.validate(g, fp8_inputs(g, 7), executor=sigdnn.Executor("gpu", engine="cute.matmul"))
    print(report.table())
    steps = [n.name for n in g.nodes]
    expected = "mm" if len(steps) == 1 else f"region(mm..{steps[-1]})"
    assert report.builders == {expected: "cute.matmul"}
    assert report.passed, report.table()


CONFIGS = [
    "coop128x128c2x1s4n",  # the default for large fp8 problems (promoted)
    "coop128x192c1x1s1",  # promoted, 192 accumulator registers
    "coop128x256c2x1s4nf",  # fast accumulation
    "pp128x128c1x1s1f",
]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", ["descaled_bf16", "e5m2_x_e4m3_f32_plain"])
def test_every_fp8_config_writes_every_element(name: str, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Output poisoned with NaN first; judged against the reference at the step's tolerance."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    g = fp8_graph(*CASES[name])
    inputs = fp8_inputs(g, zlib.crc32(f"{name}/{config}".encode()))
    executor = sigdnn.Executor("gpu", engine="cute.matmul")
    plan = executor.prepare(g)
    assert len(plan.steps) == 1 and plan.steps[0].plan.config.label == config
    out_t = g.tensor_by_name("out")
    out_dev = torch.full(out_t.dims, float("nan"), dtype=getattr(torch, str(g.dtype_of(out_t))), device="cuda")
    executor.execute(plan, {**inputs, "out": out_dev}, to_host=False)
    torch.cuda.synchronize()
    got = out_dev.float().cpu().numpy().astype(np.float64)
    want = sigdnn.Executor("reference", fusion=False).run(g, inputs)["out"]
    terms = np.matmul(np.abs(inputs["a"].astype(np.float64)), np.abs(inputs["b"].astype(np.float64)))
    tolerance = step_tolerance(g, list(g.nodes), out_t.uid)
    result = compare("out", got, want, tolerance, np.broadcast_to(terms, out_t.dims))
    assert result.passed, result


@pytest.mark.parametrize("k", [64, 272, 4112])
def test_spread_fp8_values_meet_the_fp8_accumulator_rule(k: int) -> None:
    """Values spread over [-2, 2) (sigdnn's random inputs), float32 out, no scales: the promoted fp8 GEMM
    misses the float32 bound at short K (27x at K = 64 on the H200, cuBLAS alike) and meets validation's fp8
    rule, 2 * 2**-13 * sum|a b| on top of it."""
    g = fp8_graph((256, k), (k, 256), "fp8_e4m3", "fp8_e4m3", "float32", 0, False, None)
    report = sigdnn.validate(g, seed=k, executor=sigdnn.Executor("gpu", engine="cute.matmul"))
    assert report.builders == {"mm": "cute.matmul"}
    assert report.passed, report.table()
