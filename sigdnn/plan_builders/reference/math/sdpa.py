"""Scaled dot-product attention, forward and backward, in float64 (OPS.md's sdpa).

q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv]; Hq = G * Hkv and
query head h reads kv head h // G (grouped-query; G = Hq is multi-query).
s = attn_scale * q k^T (+ bias, broadcast to [B, Hq, Sq, Skv]); the causal
mask keeps key j for query i when j <= i (top-left aligned); o = softmax(s) v;
stats = logsumexp of each row of s. A row whose every score is -inf gives
o = 0 and stats = -inf (cuDNN's rule; softmax itself would give 0/0).

The work goes in blocks of query rows of one kv head, all G query heads of
it together: their rows stack into one GEMM against that head's k and v, and
in the backward pass the sums over the G heads sharing dk and dv fold into
the GEMMs' contraction. A causal block multiplies only by the keys its last
row can see. s of a block stays cache- or at least memory-sized.
"""

from __future__ import annotations

import numpy as np

from sigdnn.plan_builders.reference.math.parallel import ieee

_BLOCK_SCORES = 1 << 18  # float64 scores per block (2 MiB)


def _row_blocks(sq: int, per_row: int) -> list[slice]:
    step = max(1, _BLOCK_SCORES // max(per_row, 1))
    return [slice(i, min(sq, i + step)) for i in range(0, sq, step)]


def _scores(
    q: np.ndarray,
    k: np.ndarray,
    attn_scale: float,
    bias: np.ndarray | None,
    causal: bool,
    b: int,
    h: int,
    groups: int,
    rows: slice,
) -> tuple[np.ndarray, int]:
    """s for query rows ``rows`` of the G heads reading kv head h: (G, r, keys), and keys (what causal leaves)."""
    keys = k.shape[2] if not causal else min(k.shape[2], rows.stop)
    heads = slice(h * groups, (h + 1) * groups)
    s = np.matmul(q[b, heads, rows], k[b, h, :keys].T)
    s *= attn_scale
    if bias is not None:
        s += bias[b, heads, rows, :keys]
    if causal:
        i = np.arange(rows.start, rows.stop)[:, None]
        j = np.arange(keys)[None, :]
        s[:, j > i] = -np.inf  # broadcast over the G heads
    return s, keys


def _check(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> int:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"sdpa takes 4-d q, k, v; got {q.shape}, {k.shape}, {v.shape}")
    hq, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or hq % hkv or k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(
            f"sdpa: q {q.shape}, k {k.shape}, v {v.shape} are not [B,Hq,Sq,D], [B,Hkv,Skv,D], [B,Hkv,Skv,Dv]"
        )
    return hq // hkv


@ieee
def sdpa(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_scale: float,
    bias: np.ndarray | None = None,
    causal: bool = False,
    generate_stats: bool = False,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(o [B, Hq, Sq, Dv], stats [B, Hq, Sq, 1] or None)."""
    groups = _check(q, k, v)
    nb, hq, sq, _ = q.shape
    hkv, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    if bias is not None:
        bias = np.broadcast_to(bias, (nb, hq, sq, skv))
    o = np.empty((nb, hq, sq, dv))
    stats = np.empty((nb, hq, sq, 1))
    for b in range(nb):
        for h in range(hkv):
            heads = slice(h * groups, (h + 1) * groups)
            for rows in _row_blocks(sq, groups * skv):
                s, keys = _scores(q, k, attn_scale, bias, causal, b, h, groups, rows)
                m = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
                shift = np.where(m == -np.inf, 0.0, m)
                s -= shift
                np.exp(s, out=s)
                total = np.sum(s, axis=-1, keepdims=True)
                out = np.matmul(s, v[b, h, :keys])
                out /= total
                o[b, heads, rows] = np.where(total == 0, 0.0, out)  # every score -inf: o = 0
                stats[b, heads, rows] = np.where(m == np.inf, np.inf, m + np.log(total))
    return o, (stats if generate_stats else None)


@ieee
def sdpa_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    o: np.ndarray,
    do: np.ndarray,
    stats: np.ndarray,
    attn_scale: float,
    bias: np.ndarray | None = None,
    causal: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) from the forward's o and stats, as cuDNN (and FlashAttention) define it.

    p = exp(s - stats); dv = p^T do; dp = do v^T; ds = p * (dp - rowsum(do * o));
    dq = attn_scale * ds k; dk = attn_scale * ds^T q. dk and dv sum over the G
    query heads that share each kv head. Rows with stats = -inf (fully masked)
    have p = 0 and contribute nothing.
    """
    groups = _check(q, k, v)
    nb, hq, sq, d = q.shape
    hkv, skv, dv_ = k.shape[1], k.shape[2], v.shape[3]
    if bias is not None:
        bias = np.broadcast_to(bias, (nb, hq, sq, skv))
    stats = np.broadcast_to(stats, (nb, hq, sq, 1))
    dq = np.empty(q.shape)
    dk = np.zeros(k.shape)
    dv = np.zeros(v.shape)
    delta = np.sum(do * o, axis=-1, keepdims=True)  # rowsum(dO * O)
    for b in range(nb):
        for h in range(hkv):
            heads = slice(h * groups, (h + 1) * groups)
            for rows in _row_blocks(sq, groups * skv):
                s, keys = _scores(q, k, attn_scale, bias, causal, b, h, groups, rows)
                lse = stats[b, heads, rows]
                s -= np.where(lse == -np.inf, 0.0, lse)
                p = np.exp(s, out=s)  # (G, r, keys)
                r = p.shape[1]
                do_rows = do[b, heads, rows].reshape(groups * r, dv_)
                dv[b, h, :keys] += p.reshape(groups * r, keys).T @ do_rows
                ds = np.matmul(do[b, heads, rows], v[b, h, :keys].T)  # dp
                ds -= delta[b, heads, rows]
                ds *= p
                ds *= attn_scale
                dq[b, heads, rows] = np.matmul(ds, k[b, h, :keys])
                dk[b, h, :keys] += ds.reshape(groups * r, keys).T @ q[b, heads, rows].reshape(groups * r, d)
    return dq, dk, dv
