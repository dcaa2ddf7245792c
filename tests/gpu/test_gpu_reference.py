"""The GPU reference on a real GPU (cuTile): the CPU tests' agreement, rounding and validation checks, on device.

Run on the H200 and an H100 (2026-12-05: 65 passed); tests/plan_builders/gpu_reference runs the same kernels
through the emulator. Skipped, with the reason, where cuTile or a GPU is missing. The 10,000-case agreement
campaign and the timings are benchmarks/gpu_reference.py.

    python -m pytest -m gpu tests/gpu/test_gpu_reference.py
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_reference_emulation import agreement_ulps, ulps

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.dtypes import DataType, round_to
from sigdnn.errors import GraphError, NoPlanError
from sigdnn.graph.ops import OP_CLASSES
from sigdnn.plan_builders.gpu_reference import backend, cases
from sigdnn.plan_builders.gpu_reference.base import unavailable_reason

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(unavailable_reason() is not None, reason=f"no GPU reference here: {unavailable_reason()}"),
]
# Pointwise modes built on the GPU's float64 libm (exp, log, sin, cos, tan, tanh, pow): NumPy's may differ
# by a float64 ulp, which moves a rounding to the output dtype by one ulp in rare elements.
LIBM_MODES = {"exp", "log", "sin", "cos", "tan", "tanh_fwd", "tanh_bwd", "sigmoid_fwd", "sigmoid_bwd", "pow"}
LIBM_MODES |= {"elu_fwd", "elu_bwd", "softplus_fwd", "softplus_bwd", "swish_fwd", "swish_bwd", "rsqrt"}
LIBM_MODES |= {"gelu_approx_tanh_fwd", "gelu_approx_tanh_bwd"}
SUMLESS = {"pointwise", "reshape", "transpose", "slice", "concatenate", "batchnorm_inference", "resample"}


def both(graph: sigdnn.Graph, inputs: dict) -> tuple[dict, dict]:
    gpu, cpu = sigdnn.Executor("gpu-reference"), sigdnn.Executor("reference")
    return gpu.execute(gpu.prepare(graph), inputs), cpu.execute(cpu.prepare(graph), inputs)


def allowed(graph: sigdnn.Graph) -> int:
    op = graph.nodes[0].op
    return 0 if op.kind in SUMLESS and getattr(op, "mode", None) not in LIBM_MODES else 1


@pytest.mark.parametrize("op", sorted(cases.BUILDERS))
def test_random_cases_agree_with_the_cpu_reference(op: str) -> None:
    rng = np.random.default_rng(sum(map(ord, op)) + 1)
    ran = 0
    for dtype in cases.dtypes_of(op):
        for seed in range(3):
            try:
                graph = cases.random_case(op, rng, dtype, size=4)
                got, want = both(graph, random_inputs(graph, seed))
            except (GraphError, NoPlanError):
                continue
            worst = max(int(agreement_ulps(got[n], want[n]).max(initial=0)) for n in want)
            assert worst <= allowed(graph), (graph.nodes[0].op, worst)
            ran += 1
    assert ran >= 10


@pytest.mark.parametrize("kind", sorted(set(OP_CLASSES) & set(cases.BUILDERS)))
def test_every_op_sample_agrees(kind: str) -> None:
    for dtype in ("float32", "float16", "bfloat16", "float64"):
        graph = sigdnn.Graph(f"{kind}_{dtype}", io_dtype=dtype, compute_dtype="float32")
        OP_CLASSES[kind].sample(graph)
        got, want = both(graph, random_inputs(graph, 0))
        assert all(int(agreement_ulps(got[n], want[n]).max(initial=0)) <= allowed(graph) for n in want)


@pytest.mark.parametrize("dtype", ["bfloat16", "fp8_e4m3", "fp8_e5m2", "float16", "float32", "int8", "int64"])
def test_the_device_rounding_is_round_to(dtype: str) -> None:
    """An identity node from float64 into each dtype: the scatter kernel's rounding, on the GPU's cvt."""
    rng = np.random.default_rng(3)
    values = rng.standard_normal(1 << 16) * np.exp2(rng.integers(-150, 140, 1 << 16).astype(np.float64))
    values[:8] = [0.0, -0.0, np.inf, -np.inf, np.nan, 464.0, 61440.0, 1 + 2.0**-8 + 2.0**-30]
    g = sigdnn.Graph("round", io_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", values.shape, dtype="float64")
    g.pointwise("identity", x, name="id").set_output(True).set_name("y")
    target = sigdnn.dtypes.as_data_type(dtype)
    got = sigdnn.Executor("gpu-reference").execute(sigdnn.Executor("gpu-reference").prepare(g), {"x": values})["y"]
    with np.errstate(all="ignore"):
        want = round_to(values, target)
    assert int(ulps(got, want).max()) == 0 or (target is DataType.INT64 and np.array_equal(got, want))


def test_device_tensors_go_in_without_host_copies() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    g.matmul(g.tensor("a", (64, 256)), g.tensor("b", (256, 32)), name="mm").set_output(True).set_name("c")
    inputs = random_inputs(g, 0)
    on_device = {k: torch.from_numpy(v.view(np.int16)).cuda().view(torch.bfloat16) for k, v in inputs.items()}
    ex = sigdnn.Executor("gpu-reference")
    got = ex.execute(ex.prepare(g), on_device)["c"]
    _, want = both(g, inputs)
    assert int(ulps(np.asarray(got), want["c"]).max()) <= 1


def test_validate_with_the_gpu_truth_passes_the_cpu_reference_as_the_device() -> None:
    g = sigdnn.Graph("chain", io_dtype="float16", compute_dtype="float32")
    a = g.tensor("a", (32, 64))
    g.pointwise("add", g.pointwise("exp", a), a, name="add").set_output(True).set_name("y")
    honest = sigdnn.validate(g, executor=sigdnn.Executor("reference"), truth="gpu")
    assert honest.passed and honest.truth == "gpu"


@pytest.mark.parametrize("kernel", ["dmma", "dmma, 64-bit offsets", "cutile"])
@pytest.mark.parametrize(
    ("batch", "m", "n", "k"), [(1, 4096 // 8, 4096 // 8, 4096 // 8), (3, 130, 70, 37), (2, 257, 129, 17), (1, 5, 3, 1)]
)
def test_the_float64_gemm_is_within_the_gemm_error_bound_of_numpy(
    kernel: str, batch: int, m: int, n: int, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ragged tiles, a batch, K = 1, on each GEMM kernel (DMMA where CuTe DSL is installed, with 32- and 64-bit
    offsets, and the cuTile one):
    |GPU - NumPy| <= 2 gamma_k (|a| @ |b|), gamma_k = k u / (1 - k u), the sum of the two products' worst-case
    rounding bounds (any order of float64 sums, FMA or not), element by element."""
    if kernel.startswith("dmma") and backend.dmma_gemm() is None:
        pytest.skip("nvidia-cutlass-dsl is not importable: no DMMA GEMM here")
    if kernel == "dmma, 64-bit offsets":  # what operands of 2^31 elements or more take
        monkeypatch.setattr(backend.dmma_gemm(), "NARROW_LIMIT", 0)
    if kernel == "cutile":
        monkeypatch.setitem(backend._modules, "dmma", None)
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((batch, m, k)), rng.standard_normal((batch, k, n))
    g = sigdnn.Graph("gemm", io_dtype="float64", compute_dtype="float64")
    g.matmul(g.tensor("a", a.shape), g.tensor("b", b.shape), name="mm").set_output(True).set_name("c")
    got = sigdnn.Executor("gpu-reference").execute(sigdnn.Executor("gpu-reference").prepare(g), {"a": a, "b": b})["c"]
    unit = np.finfo(np.float64).eps / 2
    bound = 2 * (k * unit / (1 - k * unit)) * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(got - a @ b) <= bound)


def test_the_integer_gemm_wraps_as_numpy_int64() -> None:
    rng = np.random.default_rng(6)
    a, b = rng.integers(-(2**40), 2**40, (2, 70, 45)), rng.integers(-(2**40), 2**40, (2, 45, 33))
    g = sigdnn.Graph("igemm", io_dtype="int64", compute_dtype="int64")
    g.matmul(g.tensor("a", a.shape), g.tensor("b", b.shape), name="mm").set_output(True).set_name("c")
    got = sigdnn.Executor("gpu-reference").execute(sigdnn.Executor("gpu-reference").prepare(g), {"a": a, "b": b})["c"]
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got, a @ b)
