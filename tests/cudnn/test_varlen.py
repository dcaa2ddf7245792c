"""pygraph's variable-length attention: use_padding_mask with seq_len_q / seq_len_kv, and set_ragged_offset
(token-packed q, k, v, o), forward and backward against torch float64 attention run on each sequence alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import sigdnn.cudnn as cudnn
from tests.cudnn.conftest import F64

B, H, SQ, SKV, D = 2, 2, 5, 6, 4
LQ, LKV = [3, 5], [6, 2]
SCALE = 0.4
gen = torch.Generator().manual_seed(5)


def bshd(s: int) -> tuple[int, ...]:
    return (s * H * D, D, H * D, 1)


def logical(s: int) -> torch.Tensor:
    """A [B, H, s, D] tensor in BSHD storage."""
    return torch.randn(B, s, H, D, dtype=torch.float64, generator=gen).transpose(1, 2)


def per_sequence(q, k, v, do, causal):
    """o, dq, dk, dv of each sequence cut to its lengths, [H, len, D] each."""
    found = []
    for b in range(B):
        qb, kb, vb = (t[b, :, :n].clone().requires_grad_(True) for t, n in ((q, LQ[b]), (k, LKV[b]), (v, LKV[b])))
        o = F.scaled_dot_product_attention(qb, kb, vb, scale=SCALE, is_causal=causal)
        o.backward(do[b, :, : LQ[b]])
        found.append((o.detach(), qb.grad, kb.grad, vb.grad))
    return found


@pytest.mark.parametrize("ragged", [False, True])
def test_padding_mask_and_ragged_offsets_forward_and_backward(graph, ragged):
    q, k, v, do = logical(SQ), logical(SKV), logical(SKV), logical(SQ)
    Q, K, V, DO = (graph.tensor(name=n, dim=[B, H, s, D], stride=bshd(s), data_type=F64)
                   for n, s in (("q", SQ), ("k", SKV), ("v", SKV), ("do", SQ)))  # fmt: skip
    lq = torch.tensor(LQ, dtype=torch.int32).reshape(B, 1, 1, 1)
    lkv = torch.tensor(LKV, dtype=torch.int32).reshape(B, 1, 1, 1)
    LQT, LKVT = graph.tensor_like(lq), graph.tensor_like(lkv)
    inputs = {Q: q, K: k, V: v, DO: do, LQT: lq, LKVT: lkv}
    if ragged:  # each sequence packed right after the previous one; offsets count elements
        made_offsets = {}
        for name, lengths in (("q", LQ), ("kv", LKV)):
            T = graph.tensor(name=f"{name}_off", dim=[B + 1, 1, 1, 1], stride=[1] * 4, data_type=cudnn.data_type.INT64)
            inputs[T] = torch.tensor([0, lengths[0] * H * D, sum(lengths) * H * D]).reshape(B + 1, 1, 1, 1)
            made_offsets[name] = T
        for t, logical_tensor, lengths, s, off in ((Q, q, LQ, SQ, "q"), (K, k, LKV, SKV, "kv"), (V, v, LKV, SKV, "kv"),
                                                   (DO, do, LQ, SQ, "q")):  # fmt: skip
            t.set_ragged_offset(made_offsets[off])
            packed = torch.cat([logical_tensor[b, :, :n].transpose(0, 1).reshape(-1) for b, n in enumerate(lengths)])
            storage = torch.zeros(B * s * H * D, dtype=torch.float64)
            storage[: packed.numel()] = packed
            inputs[t] = torch.as_strided(storage, (B, H, s, D), bshd(s))
    OUT, STATS = graph.sdpa(Q, K, V, attn_scale=SCALE, use_causal_mask=True, generate_stats=True,
                          use_padding_mask=True, seq_len_q=LQT, seq_len_kv=LKVT)  # fmt: skip
    STATS.set_data_type(F64)
    OUT.set_stride(bshd(SQ))
    if ragged:
        OUT.set_ragged_offset(Q.get_ragged_offset())
    DQ, DK, DV = graph.sdpa_backward(Q, K, V, OUT, DO, STATS, attn_scale=SCALE, use_causal_mask=True,
                                     use_padding_mask=True, seq_len_q=LQT, seq_len_kv=LKVT)  # fmt: skip
    outs = [OUT, DQ, DK, DV]
    for t in outs:
        t.set_output(True)
    graph.build()
    made = [torch.zeros(B * max(SQ, SKV) * H * D, dtype=torch.float64) for _ in outs]
    views = [torch.as_strided(m, t.get_dim(), t.get_stride()) for m, t in zip(made, outs)]
    graph.execute({**inputs, **dict(zip(outs, views))}, None)
    expect = per_sequence(q, k, v, do, causal=True)
    for b in range(B):
        for got, want, n in zip(views, expect[b], (LQ, LQ, LKV, LKV)):
            if ragged:
                start = sum(n[:b]) * H * D
                flat = got.as_strided((n[b], H, D), (H * D, D, 1), start)
                torch.testing.assert_close(flat.transpose(0, 1), want, rtol=1e-10, atol=1e-10)
            else:
                torch.testing.assert_close(got[b, :, : n[b]], want, rtol=1e-10, atol=1e-10)
    again = cudnn.pygraph(handle=cudnn.create_handle(device="cpu"))
    again.deserialize(graph.serialize())  # padding_mask, SEQ_LEN_*, ragged_offset_uid in cuDNN's JSON
    redone = [torch.zeros_like(m) for m in made]
    pack = {t.get_uid(): value for t, value in inputs.items()}
    pack.update({t.get_uid(): torch.as_strided(m, t.get_dim(), t.get_stride()) for t, m in zip(outs, redone)})
    again.execute(pack, None)
    for first, second in zip(made, redone):
        assert torch.equal(first, second)


def test_padding_mask_needs_both_lengths(graph):
    q = graph.tensor(name="q", dim=[1, 1, 2, 2], stride=[4, 4, 2, 1], data_type=F64)
    with pytest.raises(Exception, match="seq_len_q and seq_len_kv"):
        graph.sdpa(q, q, q, use_padding_mask=True, seq_len_q=q)
    with pytest.raises(Exception, match="without use_padding_mask"):
        graph.sdpa(q, q, q, seq_len_q=q, seq_len_kv=q)
