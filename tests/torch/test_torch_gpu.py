"""sigdnn's torch ops on CUDA tensors (the GPU backend) against the same ops on the CPU reference, within
validation's end-to-end tolerances of the cached graph; a backward fed the GPU forward's own o and stats is judged
as validation judges a step, against the reference fed the very tensors the GPU call got. Marked ``gpu``; skipped
where the GPU backend cannot run."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import sigdnn.torch as st  # noqa: E402
from sigdnn.executor.autotune import reference_check  # noqa: E402
from sigdnn.executor.host_arrays import from_torch  # noqa: E402
from sigdnn.torch.cache import _CACHE, CachedGraph  # noqa: E402
from sigdnn.validation import compare, output_tolerance  # noqa: E402

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def needs_gpu() -> None:
    from sigdnn.runtime.cuda import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason:
        pytest.skip(f"no GPU backend here: {reason}")


def judged(op: str, got: torch.Tensor, want: torch.Tensor, index: int, attributes: tuple | None = None) -> None:
    """got against want within the end-to-end tolerance of output ``index`` of the CUDA graph of ``op`` (the one
    cached with these ``attributes`` where given)."""
    graph = next(c.plan.graph for k, c in _CACHE.items()
                 if k[0] == op and k[2][3] >= 0 and attributes in (None, k[1]))  # fmt: skip
    uid = graph.outputs[index].uid
    check = compare(op, got.float().cpu().numpy().astype(np.float64), want.float().numpy().astype(np.float64),
                    output_tolerance(graph, uid))  # fmt: skip
    assert check.passed, check


def host(t: torch.Tensor) -> np.ndarray:
    """A copy of a CUDA tensor on the host, as the NumPy array sigdnn takes (bfloat16 included)."""
    return from_torch(t.detach().cpu(), "a recorded tensor")


@pytest.fixture
def cuda_calls(monkeypatch) -> dict[str, tuple]:
    """Every CUDA call of a cached graph, by op: (graph, inputs, outputs) of the latest."""
    calls: dict[str, tuple] = {}
    call = CachedGraph.__call__

    def recorded(self: CachedGraph, tensors):
        outs = call(self, tensors)
        if tensors[0].is_cuda:
            op = next(key[0] for key, c in _CACHE.items() if c is self)
            calls[op] = (self.plan.graph, [host(t) for t in tensors], [host(t) for t in outs])
        return outs

    monkeypatch.setattr(CachedGraph, "__call__", recorded)
    return calls


def judged_step(calls: dict[str, tuple], op: str) -> None:
    """The latest CUDA call of ``op`` against the reference fed its very inputs, with validation's step tolerances
    (attention's gradients may take their products from operands rounded to q's dtype: a normwise allowance)."""
    graph, inputs, outputs = calls[op]
    judge = reference_check(graph, graph.nodes, [t.uid for t in graph.outputs],
                            {t.name: a for t, a in zip(graph.inputs, inputs)})  # fmt: skip
    verdict = judge({t.name: a for t, a in zip(graph.outputs, outputs)})
    assert verdict is None, f"{op}: {verdict}"


def test_sdpa_and_its_backward_on_cuda(cuda_calls):
    """The forward against the CPU's; autograd's backward call (fed the GPU forward's own o and stats) as a step.

    Judged end to end instead, without the normwise allowance, a gradient element near zero in a row of two
    keys failed by 0.0064 on an H100 with the CuTe and cuTile backward alike (the same bits, both rounding ds to
    bf16 as flash attention does), while the GPU reference agreed with the CPU's bit for bit."""
    torch.manual_seed(0)
    q, k, v, do = (torch.randn(2, 4, 256, 64, dtype=torch.bfloat16) for _ in range(4))
    leaves = [t.detach().cuda().requires_grad_(True) for t in (q, k, v)]
    o = st.scaled_dot_product_attention(*leaves, is_causal=True)
    o.backward(do.cuda())
    judged("sdpa", o.detach(), st.scaled_dot_product_attention(q, k, v, is_causal=True), 0)
    _, inputs, outputs = cuda_calls["sdpa_backward"]
    np.testing.assert_array_equal(inputs[3], host(o))  # autograd handed the backward this very forward's o
    for got, recorded in zip((t.grad for t in leaves), outputs):
        np.testing.assert_array_equal(host(got), recorded)
    judged_step(cuda_calls, "sdpa_backward")


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
    products (torch's "high" precision: one TF32 MMA a product, where "highest" takes three, docs/architecture.md)."""
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


def test_varlen_attention_and_its_backward_on_cuda(cuda_calls):
    """flash-attention's varlen call (token-packed q / k / v, cu_seqlens): the cuTile attention's ragged path on
    CUDA against the reference on the CPU, and every step on a GPU builder (none falls back). The backward is
    judged as a step, on autograd's call (fed the GPU forward's own o and stats): judged against the CPU's
    gradients, the CPU forward's o and stats differ by an ulp here and there, which the gradients carried past
    the end-to-end tolerance (3 elements of 91,392 on an H100)."""
    torch.manual_seed(0)
    cu = torch.tensor([0, 100, 101, 357], dtype=torch.int32)
    q, k, v, do = (torch.randn(357, 4, 64, dtype=torch.bfloat16) for _ in range(4))
    leaves = [t.detach().cuda().requires_grad_(True) for t in (q, k, v)]
    o = st.varlen_attention(*leaves, cu.cuda(), cu.cuda(), 256, 256, causal=True)
    o.backward(do.cuda())
    for op in ("sdpa_varlen", "sdpa_varlen_backward"):
        plan = next(c.plan for key, c in _CACHE.items() if key[0] == op and key[2][3] >= 0)
        assert all(not s.builder.name.endswith("(fallback)") for s in plan.steps), [s.builder.name for s in plan.steps]
    judged("sdpa_varlen", o.detach(), st.varlen_attention(q, k, v, cu, cu, 256, 256, causal=True), 0)
    judged_step(cuda_calls, "sdpa_varlen_backward")


def test_flash_attention_in_a_sliding_window_and_its_backward_on_cuda(cuda_calls):
    """flash_attn_func's Mistral window (causal, 64 keys) on BSHD views, decoding-shaped (Sq 96 < Sk 320, so the band
    aligns bottom-right): the cuTile attention takes the band on CUDA (the CuTe kernel declines it), judged against
    the CPU forward and, for the backward, as a step."""
    torch.manual_seed(0)
    q, do = (torch.randn(2, 96, 4, 64, dtype=torch.bfloat16) for _ in range(2))
    k, v = (torch.randn(2, 320, 2, 64, dtype=torch.bfloat16) for _ in range(2))
    leaves = [t.detach().cuda().requires_grad_(True) for t in (q, k, v)]
    o = st.flash_attention(*leaves, causal=True, window_size=(63, 0))
    o.backward(do.cuda())
    band = (64**-0.5, True, True, 64, None)  # scale, causal, bottom_right, left_bound, right_bound
    for op, builder in (("sdpa", "cutile.sdpa"), ("sdpa_backward", "cutile.sdpa_backward")):
        plan = next(c.plan for key, c in _CACHE.items() if key[0] == op and key[2][3] >= 0 and key[1] == band)
        assert [s.builder.name for s in plan.steps] == [builder]
    want = st.flash_attention(q, k, v, causal=True, window_size=(63, 0))
    judged("sdpa", o.detach().transpose(1, 2), want.transpose(1, 2), 0, band)
    judged_step(cuda_calls, "sdpa_backward")


def test_a_plain_cuda_call_takes_the_entrys_eager_path():
    """CUDA tensors' dispatch keys (and a Parameter's, an inference tensor's) are among those eager.plain takes,
    so a plain eager call on the GPU skips the dispatcher, as one on the CPU does."""
    from sigdnn.torch import eager

    x, w = torch.randn(4, 8, device="cuda"), torch.nn.Parameter(torch.randn(8, device="cuda"))
    with torch.inference_mode():
        b = torch.randn(8, device="cuda")
    assert eager.plain((x, w, b, 1e-5), (0, 1, 2))
    mine, theirs = st.ops.layer_norm(x, w, b, 1e-5), torch.ops.sigdnn.layer_norm(x, w, b, 1e-5)
    assert all(torch.equal(m, t) for m, t in zip(mine, theirs, strict=True))


def test_repeated_calls_read_new_tensors_and_refuse_a_host_tensor_in_a_cuda_signature():
    """A cached graph's later calls take the tensors by address (Executor.execute_keyed): new inputs at new
    addresses and new contents at old ones give their own results, equal to the first call's path; a CPU tensor
    among CUDA ones has its own key, so it is checked in full and refused, never read as a device address."""
    from sigdnn.errors import SigdnnError

    w, b = torch.randn(64, device="cuda"), torch.randn(64, device="cuda")
    xs = [torch.randn(8, 64, device="cuda") for _ in range(3)]
    first = [st.ops.layer_norm(x, w, b, 1e-5)[0].clone() for x in xs]
    again = [st.ops.layer_norm(x, w, b, 1e-5)[0] for x in xs]
    assert all(torch.equal(f, a) for f, a in zip(first, again, strict=True))
    want = torch.nn.functional.layer_norm(xs[0].double(), (64,), w.double(), b.double(), 1e-5).float()
    torch.testing.assert_close(first[0], want, rtol=1e-5, atol=1e-5)
    xs[0].mul_(2.0)
    torch.testing.assert_close(
        st.ops.layer_norm(xs[0], w, b, 1e-5)[0],
        torch.nn.functional.layer_norm(xs[0].double(), (64,), w.double(), b.double(), 1e-5).float(),
        rtol=1e-5,
        atol=1e-5,
    )
    with pytest.raises(SigdnnError, match="tensor"):
        st.ops.layer_norm(xs[1], w.cpu(), b, 1e-5)
