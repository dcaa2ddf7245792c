"""sdpa and sdpa_backward nodes end to end against torch float64 (scaled_dot_product_attention + autograd).

Covers grouped-query and multi-query heads, the causal mask with Sq != Skv
(top-left aligned, as torch's is_causal), an additive bias that broadcasts,
the stats output (logsumexp per row) and a BSHD-strided q.
"""

from __future__ import annotations

import numpy as np
import pytest
from graph_runs import close, outputs, run, torch64

import sigdnn

torch = pytest.importorskip("torch")
F = torch.nn.functional

CASES = [
    # B, Hq, Hkv, Sq, Skv, D, Dv, causal, bias dims (None: no bias)
    (2, 2, 2, 5, 5, 8, 8, False, None),
    (1, 4, 2, 6, 9, 4, 3, True, None),  # GQA, causal with Sq < Skv
    (2, 3, 1, 7, 4, 5, 6, True, (1, 3, 7, 4)),  # MQA, Sq > Skv: the last rows see every key
    (2, 2, 2, 3, 5, 4, 4, False, (2, 1, 1, 5)),  # bias broadcast over heads and queries
]


def torch_attention(q, k, v, scale, bias, causal):
    """o and per-row logsumexp of the scores, in float64 torch."""
    groups = q.shape[1] // k.shape[1]
    kk, vv = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    s = scale * q @ kk.transpose(-1, -2)
    if bias is not None:
        s = s + bias
    if causal:
        keep = torch.ones(q.shape[2], k.shape[2], dtype=torch.bool).tril()
        s = s.masked_fill(~keep, float("-inf"))
    return torch.softmax(s, dim=-1) @ vv, torch.logsumexp(s, dim=-1, keepdim=True)


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_sdpa_forward_and_backward(case: tuple) -> None:
    b, hq, hkv, sq, skv, d, dv, causal, bias_dims = case
    rng = np.random.default_rng(hq * 10 + sq)
    q = rng.standard_normal((b, sq, hq, d)).transpose(0, 2, 1, 3)  # stored BSHD
    k, v = rng.standard_normal((b, hkv, skv, d)), rng.standard_normal((b, hkv, skv, dv))
    bias = rng.standard_normal(bias_dims) if bias_dims else None
    d_o = rng.standard_normal((b, hq, sq, dv))
    scale = 0.37
    g = sigdnn.Graph("attn", io_dtype="float64", intermediate_dtype="float64")
    qt = g.tensor("q", q.shape, strides=(sq * hq * d, d, hq * d, 1))
    kt, vt, dot = g.tensor("k", k.shape), g.tensor("v", v.shape), g.tensor("d_o", d_o.shape)
    bt = g.tensor("bias", bias.shape) if bias is not None else None
    o, stats = g.sdpa(qt, kt, vt, scale, bt, use_causal_mask=causal, generate_stats=True, name="sdpa")
    assert o.strides == (sq * hq * dv, dv, hq * dv, 1)  # o follows q's BSHD layout
    stats.set_data_type("float64")
    dq, dk, dv_ = g.sdpa_backward(qt, kt, vt, o, dot, stats, scale, bt, use_causal_mask=causal, name="sdpa_bwd")
    outputs(g, {"o": o, "stats": stats, "dq": dq, "dk": dk, "dv": dv_})
    inputs = {"q": q, "k": k, "v": v, "d_o": d_o, **({"bias": bias} if bias is not None else {})}
    got = run(g, inputs)
    qw, kw, vw = torch64(q, True), torch64(k, True), torch64(v, True)
    want_o, want_stats = torch_attention(qw, kw, vw, scale, torch64(bias) if bias is not None else None, causal)
    mask = None
    if bias is not None or causal:
        mask = torch.zeros(b, hq, sq, skv, dtype=torch.float64)
        mask = mask + (torch64(bias) if bias is not None else 0)
        if causal:
            mask = mask.masked_fill(~torch.ones(sq, skv, dtype=torch.bool).tril(), float("-inf"))
    torch_o = F.scaled_dot_product_attention(qw, kw, vw, attn_mask=mask, scale=scale, enable_gqa=True)
    close(want_o, torch_o)  # the oracle itself agrees with torch's sdpa
    close(got["o"], want_o)
    close(got["stats"], want_stats)
    torch_o.backward(torch64(d_o))
    close(got["dq"], qw.grad, rtol=1e-10)
    close(got["dk"], kw.grad, rtol=1e-10)
    close(got["dv"], vw.grad, rtol=1e-10)


def test_sdpa_inference_has_no_stats_and_unit_scale_by_default() -> None:
    rng = np.random.default_rng(4)
    q, k, v = (rng.standard_normal((1, 2, 3, 4)) for _ in range(3))
    g = sigdnn.Graph("attn", io_dtype="float32")
    o, stats = g.sdpa(g.tensor("q", q.shape), g.tensor("k", k.shape), g.tensor("v", v.shape), name="sdpa")
    assert stats is None and g.node_by_name("sdpa").op.attn_scale == 1.0  # cuDNN: no attn_scale, no scaling
    outputs(g, {"o": o})
    got = sigdnn.Executor().run(g, {n: a.astype(np.float32) for n, a in {"q": q, "k": k, "v": v}.items()})
    want = F.scaled_dot_product_attention(*(torch64(a.astype(np.float32)) for a in (q, k, v)), scale=1.0)
    np.testing.assert_array_equal(got["o"], want.numpy().astype(np.float32))
