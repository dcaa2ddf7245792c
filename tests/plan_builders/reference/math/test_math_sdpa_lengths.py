"""sdpa / sdpa_backward with padding masks, one length tensor at a time and both, against torch per sequence.

The oracle cuts each batch entry to its lengths and runs torch's float64
scaled_dot_product_attention on what is left (so nothing of the padding can
reach it), with autograd for the gradients and logsumexp for stats. Padding
rows must give o = 0, stats = -inf and dq = 0 (the module's rule), and
padding keys dk = dv = 0, whatever the caller's padding, o, dO and stats
hold there: this file fills them with NaN.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from math_oracles import import_torch

from sigdnn.plan_builders.reference.math import sdpa, sdpa_backward

torch = import_torch()

B, HQ, HKV, SQ, SKV, D, DV = 3, 4, 2, 5, 6, 3, 2
SCALE = 0.6


def per_sequence(q, k, v, do, lq, lkv, causal):
    """torch o, stats, dq, dk, dv on the padded shapes, zero (stats -inf) outside the sequences."""
    o, stats = np.zeros((B, HQ, SQ, DV)), np.full((B, HQ, SQ, 1), -math.inf)
    dq, dk, dv = np.zeros(q.shape), np.zeros(k.shape), np.zeros(v.shape)
    for b in range(B):
        if lq[b] == 0:
            continue
        qt = torch.tensor(q[b, :, : lq[b]], requires_grad=True)
        kt = torch.tensor(k[b, :, : lkv[b]], requires_grad=True)
        vt = torch.tensor(v[b, :, : lkv[b]], requires_grad=True)
        if lkv[b] == 0:  # every key hidden: the rule, not torch (whose softmax over nothing is NaN)
            continue
        ke, ve = kt.repeat_interleave(HQ // HKV, 0), vt.repeat_interleave(HQ // HKV, 0)
        ot = torch.nn.functional.scaled_dot_product_attention(qt, ke, ve, scale=SCALE, is_causal=causal)
        s = SCALE * qt @ ke.transpose(-1, -2)
        if causal:  # top-left: key j visible to query i when j <= i
            s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), -math.inf)
        ot.backward(torch.tensor(do[b, :, : lq[b]]))
        o[b, :, : lq[b]] = ot.detach().numpy()
        stats[b, :, : lq[b]] = torch.logsumexp(s, -1, keepdim=True).detach().numpy()
        dq[b, :, : lq[b]] = qt.grad.numpy()
        dk[b, :, : lkv[b]] = kt.grad.numpy()
        dv[b, :, : lkv[b]] = vt.grad.numpy()
    return o, stats, dq, dk, dv


def poisoned(x: np.ndarray, lengths: np.ndarray | None) -> np.ndarray:
    """x with NaN in every row past its batch entry's length."""
    if lengths is None:
        return x
    x = x.copy()
    for b, n in enumerate(lengths):
        x[b, :, n:] = np.nan
    return x


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(
    ("lq", "lkv"),
    [
        (None, [6, 2, 0]),  # keys alone: the rows all compute, keys past each length hidden
        ([5, 0, 2], None),  # queries alone: every key seen, rows past each length are padding
        ([3, 5, 1], [4, 6, 1]),
    ],
    ids=["seq_len_kv", "seq_len_q", "both"],
)
def test_lengths_match_torch_per_sequence(lq, lkv, causal: bool) -> None:
    rng = np.random.default_rng(len(str((lq, lkv))) + causal)
    q, k = rng.standard_normal((B, HQ, SQ, D)), rng.standard_normal((B, HKV, SKV, D))
    v, do = rng.standard_normal((B, HKV, SKV, DV)), rng.standard_normal((B, HQ, SQ, DV))
    lq_ = np.array(lq if lq is not None else [SQ] * B)
    lkv_ = np.array(lkv if lkv is not None else [SKV] * B)
    want = per_sequence(q, k, v, do, lq_, lkv_, causal)
    lq = None if lq is None else np.array(lq, dtype=np.int32)
    lkv = None if lkv is None else np.array(lkv, dtype=np.int32)
    qp, kp, vp, dop = poisoned(q, lq), poisoned(k, lkv), poisoned(v, lkv), poisoned(do, lq)
    o, stats = sdpa(qp, kp, vp, SCALE, None, causal, True, lq, lkv)
    # what the backward is handed outside the sequences is unspecified: NaN in o, dO and stats there
    grads = sdpa_backward(qp, kp, vp, poisoned(o, lq), dop, poisoned(stats, lq), SCALE, None, causal, lq, lkv)
    for name, got, ref in zip(("o", "stats", "dq", "dk", "dv"), (o, stats, *grads), want):
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-13, err_msg=name)


@pytest.mark.parametrize(
    ("port", "lengths", "message"),
    [
        ("seq_len_q", [1, 2], r"sdpa: seq_len_q must hold 3 lengths in \[0, 5\]"),  # one length short
        ("seq_len_q", [1, -1, 2], r"seq_len_q must hold 3 lengths in \[0, 5\]"),  # one negative among good ones
        ("seq_len_q", [6, 1, 1], r"seq_len_q must hold 3 lengths in \[0, 5\]"),  # one past Sq
        ("seq_len_kv", [6, 7, 0], r"sdpa: seq_len_kv must hold 3 lengths in \[0, 6\]"),
        ("seq_len_kv", [0, 0, 0, 0], r"seq_len_kv must hold 3 lengths"),
    ],
)
@pytest.mark.parametrize("backward", [False, True])
def test_bad_lengths_are_refused_naming_the_port(port: str, lengths, message: str, backward: bool) -> None:
    q, k, v = np.zeros((B, HQ, SQ, D)), np.zeros((B, HKV, SKV, D)), np.zeros((B, HKV, SKV, DV))
    kw = {port: np.array(lengths)}
    with pytest.raises(ValueError, match=message):
        if backward:
            o = np.zeros((B, HQ, SQ, DV))
            sdpa_backward(q, k, v, o, o, np.zeros((B, HQ, SQ, 1)), 1.0, **kw)
        else:
            sdpa(q, k, v, 1.0, **kw)
