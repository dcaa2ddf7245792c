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

import functools

import attrs
import numpy as np

from sigdnn.plan_builders.reference.math.parallel import ieee, parallel_map, workers

_BLOCK_SCORES = 1 << 18  # float64 scores per block (2 MiB)


@attrs.frozen
class _Block:
    """Query rows ``rows`` of the G query heads that read kv head h of batch b."""

    b: int
    h: int
    groups: int
    rows: slice

    @property
    def heads(self) -> slice:
        return slice(self.h * self.groups, (self.h + 1) * self.groups)


def _blocks(nb: int, hkv: int, groups: int, sq: int, skv: int) -> list[_Block]:
    step = max(1, _BLOCK_SCORES // max(groups * skv, 1))
    return [
        _Block(b, h, groups, slice(i, min(sq, i + step)))
        for b in range(nb)
        for h in range(hkv)
        for i in range(0, sq, step)
    ]


def _row_parts(r: int) -> list[slice]:
    """A block's rows, one run per core, for its elementwise work (BLAS threads the GEMMs itself)."""
    n = min(workers(), r)
    return [slice(r * i // n, r * (i + 1) // n) for i in range(n)]


@attrs.frozen
class _Scores:
    """q k^T of one block and what turns it into scores: (G, r, keys); keys stop at the block's
    last row under a causal mask (no later key is visible to any of its rows)."""

    s: np.ndarray
    bias: np.ndarray | None
    keys: int
    blk: _Block
    attn_scale: float
    causal: bool

    @classmethod
    def of(cls, q, k, bias, causal: bool, attn_scale: float, blk: _Block) -> _Scores:
        keys = k.shape[2] if not causal else min(k.shape[2], blk.rows.stop)
        s = np.matmul(q[blk.b, blk.heads, blk.rows], k[blk.b, blk.h, :keys].T)
        part_bias = bias[blk.b, blk.heads, blk.rows, :keys] if bias is not None else None
        return cls(s, part_bias, keys, blk, attn_scale, causal)

    def finish(self, part: slice) -> np.ndarray:
        """Rows ``part`` in place: * attn_scale, + bias, causal mask; returns them."""
        sp = self.s[:, part]
        sp *= self.attn_scale
        if self.bias is not None:
            sp += self.bias[:, part]
        if self.causal:
            start = self.blk.rows.start
            i = np.arange(start + part.start, start + part.stop)[:, None]
            sp[:, np.arange(self.keys)[None, :] > i] = -np.inf  # broadcast over the G heads
        return sp


def _check(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> int:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"sdpa takes 4-d q, k, v; got {q.shape}, {k.shape}, {v.shape}")
    hq, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or hq % hkv or k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(
            f"sdpa: q {q.shape}, k {k.shape}, v {v.shape} are not [B,Hq,Sq,D], [B,Hkv,Skv,D], [B,Hkv,Skv,Dv]"
        )
    return hq // hkv


def _softmax_rows(sc: _Scores, m: np.ndarray, total: np.ndarray, part: slice) -> None:
    """Rows ``part``: scores -> exp(s - max) in place, their max and sum into m and total."""
    sp = sc.finish(part)
    m[:, part] = np.max(sp, axis=-1, keepdims=True, initial=-np.inf)
    sp -= np.where(m[:, part] == -np.inf, 0.0, m[:, part])
    np.exp(sp, out=sp)
    total[:, part] = np.sum(sp, axis=-1, keepdims=True)


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
    for blk in _blocks(nb, hkv, groups, sq, skv):
        sc = _Scores.of(q, k, bias, causal, attn_scale, blk)
        m = np.empty((groups, sc.s.shape[1], 1))
        total = np.empty_like(m)
        parallel_map(functools.partial(_softmax_rows, sc, m, total), _row_parts(sc.s.shape[1]))
        out = np.matmul(sc.s, v[blk.b, blk.h, : sc.keys])
        out /= total
        o[blk.b, blk.heads, blk.rows] = np.where(total == 0, 0.0, out)  # every score -inf: o = 0
        stats[blk.b, blk.heads, blk.rows] = np.where(m == np.inf, np.inf, m + np.log(total))
    return o, (stats if generate_stats else None)


def _probability_rows(sc: _Scores, lse: np.ndarray, part: slice) -> None:
    """Rows ``part``: scores -> p = exp(s - lse) in place (0 in a fully masked row)."""
    sp = sc.finish(part)
    sp -= np.where(lse[:, part] == -np.inf, 0.0, lse[:, part])
    np.exp(sp, out=sp)


def _score_grad_rows(dp: np.ndarray, p: np.ndarray, delta: np.ndarray, attn_scale: float, part: slice) -> None:
    """Rows ``part``: dp -> d(q k^T) = attn_scale * p * (dp - delta) in place."""
    dsp = dp[:, part]
    dsp -= delta[:, part]
    dsp *= p[:, part]
    dsp *= attn_scale


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
    for blk in _blocks(nb, hkv, groups, sq, skv):
        sc = _Scores.of(q, k, bias, causal, attn_scale, blk)
        r, keys = sc.s.shape[1], sc.keys
        parts = _row_parts(r)
        parallel_map(functools.partial(_probability_rows, sc, stats[blk.b, blk.heads, blk.rows]), parts)
        p = sc.s
        do_rows = do[blk.b, blk.heads, blk.rows]
        dv[blk.b, blk.h, :keys] += p.reshape(groups * r, keys).T @ do_rows.reshape(groups * r, dv_)
        ds = np.matmul(do_rows, v[blk.b, blk.h, :keys].T)  # dp, then d(q k^T) in place
        parallel_map(functools.partial(_score_grad_rows, ds, p, delta[blk.b, blk.heads, blk.rows], attn_scale), parts)
        dq[blk.b, blk.heads, blk.rows] = np.matmul(ds, k[blk.b, blk.h, :keys])
        dk[blk.b, blk.h, :keys] += ds.reshape(groups * r, keys).T @ q[blk.b, blk.heads, blk.rows].reshape(groups * r, d)
    return dq, dk, dv
