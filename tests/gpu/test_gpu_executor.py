"""The GPU tracer bullet: one graph through both backends, compared element by element."""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
import sigdnn.validation
from sigdnn.runtime.cuda import gpu_unavailable_reason

pytestmark = pytest.mark.gpu


def _skip_without_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no GPU backend here: {reason}")
    pytest.importorskip("cuda.tile", reason="cuTile (cuda-tile) is not installed")


def block(dtype: str, dims: tuple[int, ...] = (4, 33, 1000)) -> sigdnn.Graph:
    """add -> mul -> relu -> tanh with a broadcast bias, all in ``dtype`` io."""
    g = sigdnn.Graph(f"tracer_{dtype}", io_dtype=dtype, intermediate_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", dims=dims)
    y = g.tensor("y", dims=dims)
    bias = g.tensor("bias", dims=(1, dims[1], 1))
    s = g.pointwise("add", x, y, name="add")
    m = g.pointwise("mul", s, bias, name="mul")
    r = g.pointwise("relu_fwd", m, name="relu")
    g.pointwise("tanh_fwd", r, name="tanh").set_output(True).set_name("out")
    g.pointwise("add", r, x, name="skip").set_output(True).set_name("skip_out")
    return g


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gpu_matches_reference_on_a_graph(dtype: str) -> None:
    _skip_without_gpu()
    g = block(dtype)
    report = sigdnn.validate(g, seed=11)
    print(report.table())
    assert all(b.startswith("cutile.") for b in report.builders.values()), report.builders
    assert report.passed, report.table()


def test_gpu_takes_torch_device_tensors_and_numpy_outputs() -> None:
    _skip_without_gpu()
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    g = block("bfloat16", dims=(2, 8, 256))
    inputs = sigdnn.validation.random_inputs(g, seed=5)
    want = sigdnn.Executor().run(g, inputs)
    dev = {k: torch.from_numpy(v.view(np.int16)).cuda().view(torch.bfloat16) for k, v in inputs.items()}
    out = torch.full((2, 8, 256), float("nan"), dtype=torch.bfloat16, device="cuda")
    host_out = np.full((2, 8, 256), np.nan, dtype=want["skip_out"].dtype)
    ex = sigdnn.Executor("gpu")
    got = ex.execute(ex.prepare(g), {**dev, "out": out, "skip_out": host_out}, to_host=False)
    torch.cuda.synchronize()
    assert got["skip_out"] is host_out
    got_out = out.view(torch.int16).cpu().numpy().view(want["out"].dtype)
    # The reference computes each node in float64, the GPU in float32: within 1 bf16 ulp.
    for name, arr in (("out", got_out), ("skip_out", host_out)):
        diff = np.abs(arr.astype(np.float64) - want[name].astype(np.float64))
        assert np.all(diff <= 2.0**-7 * np.maximum(np.abs(want[name].astype(np.float64)), 2.0**-126)), name


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_torch_tensors_are_ordered_on_torch_s_stream(cuda_graphs: bool) -> None:
    """No synchronize anywhere: on a torch side stream, a spin of ~20 ms, then x's values copied in, the run,
    and the outputs read back. Correct outputs need the run to wait for x (sigdnn's stream waits for torch's)
    and the read to wait for the run (torch's stream waits for sigdnn's), three times over (the third a replay
    when CUDA graphs are on)."""
    _skip_without_gpu()
    torch = pytest.importorskip("torch")
    g = block("float32", dims=(4, 33, 1000))
    inputs = sigdnn.validation.random_inputs(g, seed=6)
    want = sigdnn.Executor().run(g, inputs)
    ex = sigdnn.Executor("gpu", cuda_graphs=cuda_graphs)
    plan = ex.prepare(g)
    sources = {k: torch.from_numpy(v).cuda() for k, v in inputs.items()}
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        dev = {k: torch.zeros(v.shape, device="cuda") for k, v in inputs.items()}
        outs = {k: torch.empty(want[k].shape, device="cuda") for k in ("out", "skip_out")}
        for _ in range(3):
            for t in (*dev.values(), *outs.values()):
                t.fill_(float("nan"))
            torch.cuda._sleep(30_000_000)
            for k, t in dev.items():
                t.copy_(sources[k])  # device to device: enqueued behind the spin, no host wait
            ex.execute(plan, {**dev, **outs}, to_host=False)
            got = {k: t.cpu().numpy() for k, t in outs.items()}  # .cpu() waits for the side stream only
            for k, arr in got.items():
                np.testing.assert_allclose(arr, want[k], rtol=2e-6, atol=1e-30, err_msg=k)


def test_the_capturing_path_waits_for_torch_s_stream() -> None:
    """Validation's path (a capture per step) on torch tensors filled behind a ~20 ms spin on torch's stream:
    without the wait the steps would read the inputs' NaN fill."""
    _skip_without_gpu()
    torch = pytest.importorskip("torch")
    g = block("float32", dims=(4, 33, 1000))
    inputs = sigdnn.validation.random_inputs(g, seed=7)
    want = sigdnn.Executor().run(g, inputs)
    ex = sigdnn.Executor("gpu", fusion=False)
    plan = ex.prepare(g)
    sources = {k: torch.from_numpy(v).cuda() for k, v in inputs.items()}
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        dev = {k: torch.full(v.shape, float("nan"), device="cuda") for k, v in inputs.items()}
        torch.cuda._sleep(30_000_000)
        for k, t in dev.items():
            t.copy_(sources[k])
        captured: dict = {}
        got = ex.execute(plan, dev, capture=captured)
    for k in ("out", "skip_out"):
        np.testing.assert_allclose(got[k], want[k], rtol=2e-6, atol=1e-30, err_msg=k)
    assert captured and not any(np.isnan(a).any() for a in captured.values())


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_a_gemm_reads_the_callers_weights_through_a_transposed_view(cuda_graphs: bool) -> None:
    """dy @ w^T as a decoder layer's backward writes it: w^T a view of the caller's w (no copy), the GEMM
    reading it K-major; a second caller w moves the view (and a CUDA graph recorded on the first)."""
    _skip_without_gpu()
    torch = pytest.importorskip("torch")
    from sigdnn.graph.views import view_layout

    g = sigdnn.Graph("dgrad", io_dtype="bfloat16", intermediate_dtype="bfloat16", compute_dtype="float32")
    dy, w = g.tensor("dy", (256, 384)), g.tensor("w", (512, 384))  # w_t bf16 as w: a float32 w_t is a cast
    g.matmul(dy, view_layout(g, g.transpose(w, (1, 0), name="w_t")), name="mm").set_output(True).set_name("dx")
    ex = sigdnn.Executor("gpu", cuda_graphs=cuda_graphs)
    plan = ex.prepare(g)
    assert {s.name: s.builder.name for s in plan.steps}["w_t"] == "view" and plan.memory.input_views
    report = sigdnn.validate(g, seed=5, executor=ex)
    assert report.passed, report.table()
    for seed in (1, 2, 3):
        gen = torch.Generator().manual_seed(seed)
        host = {n: torch.randn(*t.dims, generator=gen).to(torch.bfloat16) for n, t in (("dy", dy), ("w", w))}
        got = ex.execute(plan, {n: t.cuda() for n, t in host.items()}, out="torch")["dx"]
        want = host["dy"].double() @ host["w"].double().T
        torch.testing.assert_close(got.cpu().double(), want, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_graph_constants_reach_the_device_on_every_run(cuda_graphs: bool) -> None:
    """ONNX weights are graph constants: staged once on the device and kept, a torch CUDA tensor given in their
    place serves one run (tests/plan_builders/cutile/test_bound_plans.py checks the same on host memory)."""
    _skip_without_gpu()
    torch = pytest.importorskip("torch")
    g = sigdnn.Graph("constants", io_dtype="float32", compute_dtype="float32")
    w = np.arange(96, dtype=np.float32).reshape(1, 96)
    g.pointwise("add", g.tensor("x", dims=(4, 96)), g.constant("w", w), name="add").set_output(True).set_name("y")
    x = torch.ones(4, 96, device="cuda")
    ex = sigdnn.Executor("gpu", cuda_graphs=cuda_graphs)
    plan = ex.prepare(g)
    for override in (None, None, torch.full((1, 96), -1.0, device="cuda"), None):
        got = ex.execute(plan, {"x": x} if override is None else {"x": x, "w": override})["y"]
        np.testing.assert_array_equal(got, np.broadcast_to(1 + (w if override is None else -1), (4, 96)))
