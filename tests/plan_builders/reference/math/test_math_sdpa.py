"""sdpa / sdpa_backward against torch autograd of the explicit formula (float64), torch's own
scaled_dot_product_attention, an mpmath oracle, central differences of sdpa, and the
fully-masked-row, causal and grouped-head rules.

Bounds (EPS = 2^-52): s_ij is a D-term dot product, so it is off by up to
(D + 2) EPS sigma_ij, sigma_ij = |scale| sum_d |q_id k_jd| + |bias_ij|; exp turns that into a
relative error of p_ij, and o = sum_j p_ij v_j adds Skv ulps. So o is within
k * EPS * S_o, S_o = sum_j p_ij |v_j| (1 + sigma_ij + sum_l p_il sigma_il) and
k = D + Skv + 8; stats the same with S = max_j sigma_ij + |stats| + 1. The gradients
chain a few more sums (Dv, Skv, G * Sq terms): S is the same chain of products
computed on magnitudes, k = D + Dv + Skv + G * Sq + 16. Against torch the factor doubles.
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from math_oracles import assert_within, check_gradient, import_torch, in_layout

from sigdnn.plan_builders.reference.math import sdpa, sdpa_backward

sdpa_module = importlib.import_module("sigdnn.plan_builders.reference.math.sdpa")  # the package's sdpa is the function

torch = import_torch()
mp = pytest.importorskip("mpmath")


def causal_mask(sq: int, skv: int) -> np.ndarray:
    """True where a score is masked: key j after query i (top-left aligned)."""
    return np.arange(skv)[None, :] > np.arange(sq)[:, None]


def torch_sdpa(q, k, v, do, scale, bias, causal):
    """o, stats, dq, dk, dv by autograd through the explicit formula; fully masked rows give o = 0."""
    qt, kt, vt = (torch.tensor(a, requires_grad=True) for a in (q, k, v))
    g = q.shape[1] // k.shape[1]
    s = scale * qt @ kt.repeat_interleave(g, 1).transpose(-1, -2)
    if bias is not None:
        s = s + torch.tensor(bias)
    if causal:
        s = s.masked_fill(torch.tensor(causal_mask(q.shape[2], k.shape[2])), -math.inf)
    dead = torch.isinf(s).all(-1, keepdim=True) & (s < 0).all(-1, keepdim=True)
    s_safe = torch.where(dead, torch.zeros_like(s), s)
    p = torch.softmax(s_safe, -1) * (~dead)
    o = p @ vt.repeat_interleave(g, 1)
    stats = torch.where(
        dead, torch.full_like(dead, -math.inf, dtype=s.dtype), torch.logsumexp(s_safe, -1, keepdim=True)
    )
    o.backward(torch.tensor(do))
    return o.detach().numpy(), stats.detach().numpy(), qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


def magnitudes(q, k, v, do, scale, bias, causal):
    """S for o, stats, dq, dk, dv (module docstring), from magnitudes and torch's p."""
    g = q.shape[1] // k.shape[1]
    ke, ve = np.repeat(k, g, 1), np.repeat(v, g, 1)
    sigma = abs(scale) * np.abs(q) @ np.abs(ke).swapaxes(-1, -2) + (np.abs(bias) if bias is not None else 0.0)
    s = scale * q @ ke.swapaxes(-1, -2) + (bias if bias is not None else 0.0)
    if causal:
        s = np.where(causal_mask(q.shape[2], k.shape[2]), -np.inf, s)
    sigma = np.where(np.isinf(s), 0.0, sigma)  # masked scores have p = 0 and no error
    m = np.max(s, -1, keepdims=True)
    e = np.exp(s - np.where(np.isinf(m), 0.0, m))
    with np.errstate(invalid="ignore"):  # fully masked rows: 0 / 0
        p = np.nan_to_num(e / np.sum(e, -1, keepdims=True))
    amp = 1 + sigma + np.sum(p * sigma, -1, keepdims=True)  # relative error factor of p
    pa = p * amp
    s_o = pa @ np.abs(ve)
    s_stats = np.max(sigma, -1, keepdims=True) + np.abs(np.where(np.isinf(m), 0.0, m)) + 1
    o = p @ ve
    dp = np.abs(do) @ np.abs(ve).swapaxes(-1, -2) + np.sum(np.abs(do * o), -1, keepdims=True)
    ds = pa * dp * abs(scale)
    s_dq = ds @ np.abs(ke)
    s_dk = (ds.swapaxes(-1, -2) @ np.abs(q)).reshape(k.shape[0], k.shape[1], g, *k.shape[2:]).sum(2)
    s_dv = (pa.swapaxes(-1, -2) @ np.abs(do)).reshape(v.shape[0], v.shape[1], g, *v.shape[2:]).sum(2)
    return s_o, s_stats, s_dq, s_dk, s_dv


def check_all(q, k, v, scale, bias, causal, layout="contiguous", seed=0, factor=2):
    rng = np.random.default_rng(seed)
    do = rng.standard_normal((*q.shape[:3], v.shape[3]))
    want = torch_sdpa(q, k, v, do, scale, bias, causal)
    views = [in_layout(a, layout, seed + i) for i, a in enumerate((q, k, v, do))]
    o, stats = sdpa(*views[:3], scale, bias, causal, generate_stats=True)
    dq, dk, dv = sdpa_backward(*views[:3], o, views[3], stats, scale, bias, causal)
    mags = magnitudes(q, k, v, do, scale, bias, causal)
    hq, sq, d = q.shape[1:]
    skv, dvd = k.shape[2], v.shape[3]
    g = hq // k.shape[1]
    k_fwd = factor * (d + skv + 8)
    k_bwd = factor * (d + dvd + skv + g * sq + 16)
    for name, got, w, s, kk in zip(
        ("o", "stats", "dq", "dk", "dv"), (o, stats, dq, dk, dv), want, mags, (k_fwd, k_fwd, k_bwd, k_bwd, k_bwd)
    ):
        assert_within(got, w, s, kk, name)


CASES = [
    # B, Hq, Hkv, Sq, Skv, D, Dv, causal, bias shape (None: no bias)
    (2, 4, 2, 5, 7, 3, 4, False, (1, 4, 5, 7)),
    (1, 3, 1, 6, 4, 2, 2, True, None),  # multi-query, Sq > Skv
    (2, 2, 2, 7, 7, 4, 4, True, (2, 1, 1, 7)),
    (1, 6, 3, 3, 9, 5, 6, True, (1, 1, 3, 1)),  # Sq < Skv
    (1, 1, 1, 1, 1, 1, 1, False, None),
]


@pytest.mark.parametrize("layout", ["contiguous", "padded", "permuted"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_torch(case, layout: str) -> None:
    b, hq, hkv, sq, skv, d, dv, causal, bias_shape = case
    rng = np.random.default_rng(sq * 7 + skv)
    q, k, v = (
        rng.standard_normal((b, hq, sq, d)),
        rng.standard_normal((b, hkv, skv, d)),
        rng.standard_normal((b, hkv, skv, dv)),
    )
    bias = rng.standard_normal(bias_shape) if bias_shape else None
    check_all(q, k, v, 0.4, bias, causal, layout, seed=sq)


def test_matches_torch_scaled_dot_product_attention() -> None:
    """torch's fused op (enable_gqa, top-left is_causal, default scale 1/sqrt(D)) as a second oracle."""
    rng = np.random.default_rng(2)
    q, k, v = rng.standard_normal((2, 6, 5, 4)), rng.standard_normal((2, 2, 8, 4)), rng.standard_normal((2, 2, 8, 3))
    for causal in (False, True):
        want = torch.nn.functional.scaled_dot_product_attention(
            torch.tensor(q), torch.tensor(k), torch.tensor(v), is_causal=causal, enable_gqa=True
        ).numpy()
        o, _ = sdpa(q, k, v, 1 / math.sqrt(4), None, causal)
        assert_within(o, want, np.abs(want) + 1, 64, f"causal={causal}")


def test_against_exact_values() -> None:
    mp.mp.dps = 40
    rng = np.random.default_rng(4)
    q, k, v = rng.standard_normal((1, 2, 3, 2)), rng.standard_normal((1, 1, 4, 2)), rng.standard_normal((1, 1, 4, 3))
    bias = rng.standard_normal((1, 2, 3, 4))
    o, stats = sdpa(q, k, v, 0.7, bias, True, generate_stats=True)
    s_o, s_stats, *_ = magnitudes(q, k, v, np.zeros_like(o), 0.7, bias, True)
    for h, i in np.ndindex(2, 3):
        s = [
            mp.mpf(0.7) * mp.fsum(mp.mpf(q[0, h, i, t]) * mp.mpf(k[0, 0, j, t]) for t in range(2))
            + mp.mpf(bias[0, h, i, j])
            for j in range(i + 1)
        ]
        lse = mp.log(mp.fsum(mp.exp(x) for x in s))
        want_o = [float(mp.fsum(mp.exp(s[j] - lse) * mp.mpf(v[0, 0, j, c]) for j in range(i + 1))) for c in range(3)]
        assert_within(o[0, h, i], np.array(want_o), s_o[0, h, i], 2 + 4 + 8, f"o[{h},{i}]")
        assert_within(stats[0, h, i], np.array([float(lse)]), s_stats[0, h, i], 2 + 4 + 8, f"stats[{h},{i}]")


def test_hand_worked() -> None:
    """One query, two keys with scores 0 and ln 3 (q.k = ln 3, scale 1): p = [1/4, 3/4]."""
    q = np.array([[[[math.log(3.0)]]]])
    k = np.array([[[[0.0], [1.0]]]])
    v = np.array([[[[4.0, 0.0], [0.0, 8.0]]]])
    o, stats = sdpa(q, k, v, 1.0, generate_stats=True)
    assert_within(o, np.array([[[[1.0, 6.0]]]]), 8.0, 4)
    assert_within(stats, np.array([[[[math.log(4.0)]]]]), 2.0, 4)
    o, _ = sdpa(q, k, v, 1.0, causal=True)  # query 0 sees key 0 only
    assert o.ravel().tolist() == [4.0, 0.0]


def test_fully_masked_rows_give_zero_and_minus_infinity() -> None:
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((1, 2, 3, 2)), rng.standard_normal((1, 1, 4, 2)), rng.standard_normal((1, 1, 4, 2))
    bias = np.zeros((1, 2, 3, 4))
    bias[0, 1, 2, :] = -np.inf
    o, stats = sdpa(q, k, v, 1.0, bias, generate_stats=True)
    assert (o[0, 1, 2] == 0).all() and stats[0, 1, 2, 0] == -np.inf
    assert np.isfinite(o).all() and np.isfinite(np.delete(stats.ravel(), 5)).all()
    check_all(q, k, v, 1.0, bias, False)  # the oracle zeroes the row too: dq, dk, dv agree
    dq, _, _ = sdpa_backward(q, k, v, o, np.ones_like(o), stats, 1.0, bias)
    assert (dq[0, 1, 2] == 0).all()


def test_gradients_are_central_differences_of_sdpa() -> None:
    rng = np.random.default_rng(6)
    q, k, v = rng.standard_normal((1, 4, 3, 2)), rng.standard_normal((1, 2, 5, 2)), rng.standard_normal((1, 2, 5, 3))
    bias = rng.standard_normal((1, 1, 3, 5))
    do = rng.standard_normal((1, 4, 3, 3))
    for causal in (False, True):
        o, stats = sdpa(q, k, v, 0.6, bias, causal, generate_stats=True)
        dq, dk, dv = sdpa_backward(q, k, v, o, do, stats, 0.6, bias, causal)
        check_gradient(lambda a, c=causal: float(np.sum(do * sdpa(a, k, v, 0.6, bias, c)[0])), q, dq, rng)
        check_gradient(lambda a, c=causal: float(np.sum(do * sdpa(q, a, v, 0.6, bias, c)[0])), k, dk, rng)
        check_gradient(lambda a, c=causal: float(np.sum(do * sdpa(q, k, a, 0.6, bias, c)[0])), v, dv, rng)


@pytest.mark.parametrize("scores", [1, 5, 40])
def test_row_blocks_give_the_same_results(scores: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    q, k, v = rng.standard_normal((2, 4, 9, 3)), rng.standard_normal((2, 2, 6, 3)), rng.standard_normal((2, 2, 6, 2))
    bias, do = rng.standard_normal((2, 4, 9, 6)), rng.standard_normal((2, 4, 9, 2))
    want = [
        *sdpa(q, k, v, 0.5, bias, True, True),
        *sdpa_backward(
            q,
            k,
            v,
            *sdpa(q, k, v, 0.5, bias, True, True)[:1],
            do,
            sdpa(q, k, v, 0.5, bias, True, True)[1],
            0.5,
            bias,
            True,
        ),
    ]
    monkeypatch.setattr(sdpa_module, "_BLOCK_SCORES", scores)
    o, stats = sdpa(q, k, v, 0.5, bias, True, True)
    got = [o, stats, *sdpa_backward(q, k, v, o, do, stats, 0.5, bias, True)]
    for g, w in zip(got, want):
        assert_within(g, w, np.abs(w) + 1, 64)


@pytest.mark.parametrize(
    ("q", "k", "v"),
    [
        ((1, 3, 2, 2), (1, 2, 2, 2), (1, 2, 2, 2)),  # 3 query heads over 2 kv heads
        ((1, 2, 2, 2), (1, 0, 2, 2), (1, 0, 2, 2)),  # no kv head
        ((1, 2, 2, 2), (1, 2, 3, 2), (1, 2, 2, 2)),  # k and v of different lengths
        ((1, 2, 2, 2), (1, 2, 2, 2), (1, 1, 2, 2)),  # k and v of different heads
        ((2, 2, 2, 2), (1, 2, 2, 2), (1, 2, 2, 2)),  # q and k of different batches
        ((1, 2, 2, 3), (1, 2, 2, 2), (1, 2, 2, 2)),  # q and k of different head dims
    ],
)
def test_mismatched_shapes_are_refused(q, k, v) -> None:
    with pytest.raises(ValueError, match=r"are not \[B,Hq,Sq,D\], \[B,Hkv,Skv,D\], \[B,Hkv,Skv,Dv\]"):
        sdpa(np.zeros(q), np.zeros(k), np.zeros(v), 1.0)


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="4-d"):
        sdpa(np.zeros((3, 2, 2)), np.zeros((1, 2, 2, 2)), np.zeros((1, 2, 2, 2)), 1.0)


@st.composite
def attention(draw: st.DrawFn):
    b, hkv, g = draw(st.integers(1, 2)), draw(st.integers(1, 2)), draw(st.sampled_from([1, 2, 3]))
    sq, skv = draw(st.integers(1, 6)), draw(st.integers(1, 6))
    d, dv = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    bias = draw(st.sampled_from([None, (1, 1, sq, skv), (b, 1, 1, skv), (1, hkv * g, sq, 1), (b, hkv * g, sq, skv)]))
    return b, hkv * g, hkv, sq, skv, d, dv, draw(st.booleans()), bias


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=attention(),
    layout=st.sampled_from(["contiguous", "padded", "permuted", "reversed"]),
    seed=st.integers(0, 2**31),
)
def test_generated(case, layout: str, seed: int) -> None:
    b, hq, hkv, sq, skv, d, dv, causal, bias_shape = case
    rng = np.random.default_rng(seed)
    q, k, v = (
        rng.standard_normal((b, hq, sq, d)),
        rng.standard_normal((b, hkv, skv, d)),
        rng.standard_normal((b, hkv, skv, dv)),
    )
    bias = rng.standard_normal(bias_shape) if bias_shape else None
    check_all(q, k, v, float(rng.uniform(0.1, 1.5)), bias, causal, layout, seed)
