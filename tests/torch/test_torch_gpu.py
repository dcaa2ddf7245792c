"""sigdnn's torch ops on CUDA tensors (the GPU backend) against the same ops on the CPU reference, within
validation's end-to-end tolerances of the cached graph. Marked ``gpu``; skipped where the GPU backend cannot run."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sigdnn.torch as st  # noqa: E402
from sigdnn.torch.cache import _CACHE  # noqa: E402
from sigdnn.validation import compare, output_tolerance  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def needs_gpu() -> None:
    from sigdnn.runtime.cuda import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"no GPU backend here: {reason}")


def judged(op: str, got: torch.Tensor, want: torch.Tensor, index: int) -> None:
    graph = next(c.plan.graph for k, c in _CACHE.items() if k[0] == op and k[2] == "cuda")
    uid = graph.outputs[index].uid
    check = compare(op, got.float().cpu().numpy().astype(np.float64), want.float().numpy().astype(np.float64),
                    output_tolerance(graph, uid))  # fmt: skip
    assert check.passed, check


def test_sdpa_and_its_backward_on_cuda():
    """The forward against the CPU's; the backward judged on the GPU forward's own o and stats, as its graph's
    tolerance assumes (see the varlen test below)."""
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(2, 4, 256, 64, dtype=torch.bfloat16) for _ in range(4))
    leaves = [t.detach().cuda().requires_grad_(True) for t in (q, k, v)]
    o = st.scaled_dot_product_attention(*leaves, is_causal=True)
    o.backward(do.cuda())
    judged("sdpa", o.detach(), st.scaled_dot_product_attention(q, k, v, is_causal=True), 0)
    o_gpu, stats = torch.ops.sigdnn.sdpa(q.cuda(), k.cuda(), v.cuda(), 64**-0.5, True)
    assert torch.equal(o_gpu, o.detach())  # the autograd call ran this very forward
    want = torch.ops.sigdnn.sdpa_backward(q, k, v, o_gpu.cpu(), do, stats.cpu(), 64**-0.5, True)
    for i, (got, expected) in enumerate(zip((t.grad for t in leaves), want)):
        judged("sdpa_backward", got, expected, i)


def test_layer_norm_and_conv_on_cuda():
    torch.manual_seed(0)
    x, w, b = (
        torch.randn(64, 1024, dtype=torch.bfloat16),
        torch.randn(1024, dtype=torch.bfloat16),
        torch.randn(1024, dtype=torch.bfloat16),
    )
    judged("layer_norm", st.layer_norm(x.cuda(), (1024,), w.cuda(), b.cuda()), st.layer_norm(x, (1024,), w, b), 0)
    xi = torch.randn(8, 64, 14, 14, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    wi = torch.randn(64, 64, 3, 3, dtype=torch.bfloat16).contiguous(memory_format=torch.channels_last)
    judged("conv", st.conv(xi.cuda(), wi.cuda(), padding=1), st.conv(xi, wi, padding=1), 0)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_delta_rule_and_its_backward_on_cuda(kind, monkeypatch):
    """bf16 q, k, v, beta; float32 gates and state; sequences across the chunk of 64 (1, 63, 64, 65, 300). TF32
    products (torch's "high" precision): the exact float32 kernels take about 4 minutes to compile
    (docs/architecture.md), the TF32 ones under one."""
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "high")
    torch.manual_seed(0)
    lengths, heads, dim = (1, 63, 64, 65, 300), 4, 64
    tokens = sum(lengths)
    cu = torch.tensor([0, *np.cumsum(lengths)], dtype=torch.int32)
    q, k = (torch.nn.functional.normalize(torch.randn(tokens, heads, dim), dim=-1).bfloat16() for _ in range(2))
    v, d_o = (torch.randn(tokens, heads, dim, dtype=torch.bfloat16) for _ in range(2))
    g = -0.5 * torch.rand((tokens, heads, dim) if kind == "kda" else (tokens, heads))
    beta = torch.rand(tokens, heads).bfloat16()
    h0 = torch.randn(len(lengths), heads, dim, dim) * 0.1
    results = {}
    for device in ("cpu", "cuda"):
        leaves = [t.detach().to(device).requires_grad_(True) for t in (q, k, v, g, beta, h0)]
        o, final = getattr(torch.ops.sigdnn, kind)(*leaves[:5], cu.to(device), leaves[5], None, False, True)
        o.backward(d_o.to(device))
        results[device] = [o.detach(), final.detach(), *(t.grad for t in leaves)]
    for index in range(2):
        judged(kind, results["cuda"][index], results["cpu"][index], index)
    for index, (got, want) in enumerate(zip(results["cuda"][2:], results["cpu"][2:])):
        judged(f"{kind}_bwd", got, want, index)


def test_varlen_attention_and_its_backward_on_cuda():
    """flash-attention's varlen call (token-packed q / k / v, cu_seqlens): the cuTile attention's ragged path on
    CUDA against the reference on the CPU, and every step on a GPU builder (none falls back). The backward is
    judged on the GPU forward's own o and stats, as its graph's tolerance assumes: the CPU forward's differ from
    them by an ulp here and there, which the gradients carry past that tolerance (3 elements of 91,392 on an H100)."""
    torch.manual_seed(0)
    cu = torch.tensor([0, 100, 101, 357], dtype=torch.int32)
    q, k, v, do = (torch.randn(357, 4, 64, dtype=torch.bfloat16) for _ in range(4))
    leaves = [t.detach().cuda().requires_grad_(True) for t in (q, k, v)]
    o = st.varlen_attention(*leaves, cu.cuda(), cu.cuda(), 256, 256, causal=True)
    o.backward(do.cuda())
    for op in ("sdpa_varlen", "sdpa_varlen_backward"):
        plan = next(c.plan for key, c in _CACHE.items() if key[0] == op and key[2] == "cuda")
        assert all(not s.builder.name.endswith("(fallback)") for s in plan.steps), [s.builder.name for s in plan.steps]
    judged("sdpa_varlen", o.detach(), st.varlen_attention(q, k, v, cu, cu, 256, 256, causal=True), 0)
    scale, ops = 64**-0.5, torch.ops.sigdnn
    o_gpu, stats = ops.sdpa_varlen(q.cuda(), k.cuda(), v.cuda(), cu.cuda(), cu.cuda(), 256, 256, scale, True)
    assert torch.equal(o_gpu, o.detach())  # the autograd call ran this very forward
    want = ops.sdpa_varlen_backward(q, k, v, o_gpu.cpu(), do, stats.cpu(), cu, cu, 256, 256, scale, True)
    for i, (got, expected) in enumerate(zip((t.grad for t in leaves), want)):
        judged("sdpa_varlen_backward", got, expected, i)
