"""The same cuDNN-frontend-style graph code on a GPU handle and on the CPU reference: the GPU handle's executor
judged by ``sigdnn.validate``, and its results close to the CPU handle's. Marked ``gpu``; skipped where the GPU
backend cannot run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import sigdnn.cudnn as cudnn
from sigdnn.cudnn.graph import executor_for
from sigdnn.validation import validate

pytestmark = pytest.mark.gpu
BF16, F32 = cudnn.data_type.BFLOAT16, cudnn.data_type.FLOAT


@pytest.fixture(scope="module", autouse=True)
def needs_gpu() -> None:
    from sigdnn.runtime.cuda import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"no GPU backend here: {reason}")


def conv_bias_relu(g, make):
    x, w, b = make(8, 64, 14, 14, channels_last=True), make(64, 64, 3, 3, channels_last=True), make(1, 64, 1, 1)
    X, W, B = g.tensor_like(x), g.tensor_like(w), g.tensor_like(b)
    y = g.relu(g.bias(g.conv_fprop(X, W, padding=[1, 1], stride=[1, 1], dilation=[1, 1]), B))
    return {X: x, W: w, B: b}, [y]


def matmul_bias_gelu(g, make):
    a, b, c = make(4, 256, 512), make(1, 512, 384), make(1, 1, 384)
    A, B, C = g.tensor_like(a), g.tensor_like(b), g.tensor_like(c)
    return {A: a, B: b, C: c}, [g.gelu(g.add(g.matmul(A, B), C))]


def attention(g, make):
    q, k, v, do = (make(2, 4, 128, 64) for _ in range(4))
    Q, K, V, DO = (g.tensor_like(t) for t in (q, k, v, do))
    o, stats = g.sdpa(Q, K, V, attn_scale=1 / math.sqrt(64), use_causal_mask=True, generate_stats=True)
    dq, dk, dv = g.sdpa_backward(Q, K, V, o, DO, stats, attn_scale=1 / math.sqrt(64), use_causal_mask=True)
    return {Q: q, K: k, V: v, DO: do}, [o, dq, dk, dv]


def windowed_attention(g, make):
    """The pygraph's sliding window on a key cache: bottom-right causal, 48 keys wide, 96 queries on 160 keys."""
    q, do, k, v = make(2, 4, 96, 64), make(2, 4, 96, 64), make(2, 4, 160, 64), make(2, 4, 160, 64)
    Q, K, V, DO = (g.tensor_like(t) for t in (q, k, v, do))
    band = {"use_causal_mask_bottom_right": True, "sliding_window_length": 48}
    o, stats = g.sdpa(Q, K, V, attn_scale=1 / math.sqrt(64), generate_stats=True, **band)
    dq, dk, dv = g.sdpa_backward(Q, K, V, o, DO, stats, attn_scale=1 / math.sqrt(64), **band)
    return {Q: q, K: k, V: v, DO: do}, [o, dq, dk, dv]


def norms(g, make):
    x, s, b, dy = make(64, 1024), make(1, 1024), make(1, 1024), make(64, 1024)
    X, S, B, DY = (g.tensor_like(t) for t in (x, s, b, dy))
    y, mean, inv = g.layernorm(cudnn.norm_forward_phase.TRAINING, X, S, B, 1e-5)
    dx, ds, db = g.layernorm_backward(DY, X, S, mean, inv)
    r, _ = g.rmsnorm(cudnn.norm_forward_phase.INFERENCE, X, S, None, 1e-5)
    sm, _ = g.softmax(X)
    red = g.reduction(X, cudnn.reduction_mode.ADD)
    red.set_dim([64, 1]).set_data_type(F32)
    return {X: x, S: s, B: b, DY: dy}, [y, dx, ds, db, r, sm, red]


@pytest.mark.parametrize(
    "case", [conv_bias_relu, matmul_bias_gelu, attention, windowed_attention, norms], ids=lambda f: f.__name__
)
def test_gpu_handle_agrees_with_the_reference(case):
    results, results_inputs = {}, {}
    for device in ("cpu", "gpu"):
        torch.manual_seed(0)
        where = "cuda" if device == "gpu" else "cpu"

        def make(*dims, channels_last=False, where=where):
            t = torch.randn(*dims, dtype=torch.bfloat16).to(where)  # (CUDA's generator draws other numbers)
            return t.contiguous(memory_format=torch.channels_last) if channels_last else t

        handle = cudnn.create_handle(device=device)
        g = cudnn.pygraph(io_data_type=BF16, intermediate_data_type=F32, compute_data_type=F32, handle=handle)
        inputs, outputs = case(g, make)
        results_inputs[device] = inputs
        for t in outputs:
            t.set_output(True)
        g.build([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        made = [torch.empty_strided(t.get_dim(), t.get_stride(), dtype=_torch(t), device=where) for t in outputs]
        workspace = torch.empty(g.get_workspace_size(), dtype=torch.uint8, device=where)
        g.execute({**inputs, **dict(zip(outputs, made))}, workspace, handle=handle)
        results[device] = (g, outputs, [m.float().cpu().numpy().astype(np.float64) for m in made])
    g, outputs, want = results["cpu"]
    gpu_graph, _, got = results["gpu"]
    # Correctness is validation's verdict on the GPU handle's own executor: every step against the reference
    # with its accumulation bounds (a direct compare of the outputs has no |terms| for a reduction's bound: one
    # attention dv element of 65,536 once stood 14% past it: validation judges it with those bounds).
    host = {t.get_name(): v.float().cpu().numpy().astype(_numpy(t)) for t, v in results_inputs["gpu"].items()}
    report = validate(gpu_graph.graph, host, executor=executor_for(gpu_graph._handle()))
    assert report.passed, report.table()
    for t, a, b in zip(outputs, got, want):  # the handle ran the same graph: its results are the CPU handle's
        assert np.allclose(a, b, rtol=0.05, atol=0.05), t.get_name()


def _torch(t):
    return {cudnn.data_type.BFLOAT16: torch.bfloat16, cudnn.data_type.FLOAT: torch.float32}[t.get_data_type()]


def _numpy(t):
    import ml_dtypes

    return {cudnn.data_type.BFLOAT16: ml_dtypes.bfloat16, cudnn.data_type.FLOAT: np.float32}[t.get_data_type()]
