"""Scaled dot-product attention, forward and backward, in float64 (docs/ops.md's sdpa).

q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv]; Hq = G * Hkv and
query head h reads kv head h // G (grouped-query; G = Hq is multi-query).
s = attn_scale * q k^T (+ bias, broadcast to [B, Hq, Sq, Skv]); the causal
mask keeps key j for query i when j <= i, narrowed or shifted by a diagonal
band (graph/ops/sdpa.py's ``Band``: left and right bounds, top-left or
bottom-right alignment); o = softmax(s) v;
stats = logsumexp of each row of s. A row whose every score is -inf gives
o = 0 and stats = -inf (cuDNN's rule; softmax itself would give 0/0).

Padding masks (``seq_len_q`` / ``seq_len_kv``, one length per batch) hide
keys j >= seq_len_kv[b] and treat query rows i >= seq_len_q[b] as fully
masked (o = 0, stats = -inf, no gradient); positions outside a sequence are
read as 0, so whatever a caller's padding holds never reaches a result.

The work goes in blocks of at most ``_BLOCK_SCORES`` scores (2 MiB of
float64, which stays in L2 between the GEMMs) over (batch, kv head, query
head of the group, query row): rows of one head first, then whole heads,
whole kv heads, whole batches, so a block of short sequences covers many
heads and batches in one batched GEMM (host cost follows the scores, not
the number of heads), and a block of long ones is a few rows of one head.
A block is never more than one row of Skv scores, and multiplies only by
the keys its rows can see (none past its longest key sequence or its last
row's right bound, the causal mask among them): a result does not depend
on how far a caller's padding runs.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import attrs
import numpy as np

from sigdnn.graph.ops.sdpa import BLOCK_SCORES as _BLOCK_SCORES
from sigdnn.graph.ops.sdpa import Band
from sigdnn.plan_builders.reference.math.parallel import ieee


@attrs.frozen
class _Block:
    """Batches, kv heads, query heads within the group and query rows of one block."""

    batches: slice
    heads: slice
    groups: slice
    rows: slice


def _extent(budget: int, per_item: int, count: int) -> int:
    """How many items of ``per_item`` scores fit the budget (at least 1, at most ``count``)."""
    return min(count, max(1, budget // max(per_item, 1)))


def _ranges(count: int, step: int) -> list[slice]:
    return [slice(i, min(count, i + step)) for i in range(0, count, step)]


def _blocks(nb: int, hkv: int, groups: int, sq: int, skv: int) -> Iterator[_Block]:
    """Blocks filling the score budget innermost axis first (rows, query heads, kv heads, batches)."""
    rows = _extent(_BLOCK_SCORES, skv, sq)
    per = rows * skv
    g = _extent(_BLOCK_SCORES, per, groups) if rows == sq else 1
    per *= g
    h = _extent(_BLOCK_SCORES, per, hkv) if g == groups else 1
    per *= h
    b = _extent(_BLOCK_SCORES, per, nb) if h == hkv else 1
    for bs, hs, gs, rs in itertools.product(_ranges(nb, b), _ranges(hkv, h), _ranges(groups, g), _ranges(sq, rows)):
        yield _Block(bs, hs, gs, rs)


@attrs.frozen
class _Masks:
    """Which keys each query row sees: key j is visible to row i of batch b when low[b, i] <= j < high[b, i]
    (``Band.visible``: the band and the padding)."""

    band: Band
    seq_len_q: np.ndarray | None  # [B] int64
    seq_len_kv: np.ndarray | None
    sq: int
    skv: int

    def hidden(self, blk: _Block, keys: int) -> np.ndarray | None:
        """Bool [nb, 1, 1, r, keys] (broadcast over heads): True where the score is masked; None: none is."""
        rows = np.arange(blk.rows.start, blk.rows.stop)
        lq = None if self.seq_len_q is None else self.seq_len_q[blk.batches]
        lkv = None if self.seq_len_kv is None else self.seq_len_kv[blk.batches]
        hidden = self.band.hidden(rows, keys, self.sq, self.skv, lq, lkv)
        return None if hidden is None else hidden[:, None, None]

    def keys(self, blk: _Block, skv: int) -> int:
        """Keys the block multiplies by: none past its batches' longest key sequence, nor past what its last row's
        right bound lets it see (so padding past them changes no sum), at least one."""
        lq = np.full(1, self.sq) if self.seq_len_q is None else self.seq_len_q[blk.batches]
        lkv = np.full(1, skv) if self.seq_len_kv is None else self.seq_len_kv[blk.batches]
        keys = int(lkv.max())
        if self.band.right is not None:
            shift = int((lkv - lq).max()) if self.band.bottom_right else 0
            keys = min(keys, blk.rows.stop + shift + self.band.right)
        return min(skv, max(keys, 1))


def _zero_outside(x: np.ndarray, seq_len: np.ndarray | None) -> np.ndarray:
    """x [B, H, S, E] with rows s >= seq_len[b] set to 0 (a copy); x itself without lengths."""
    if seq_len is None:
        return x
    inside = np.arange(x.shape[2])[None, :] < seq_len[:, None]
    return np.where(inside[:, None, :, None], x, 0.0)


def _lengths(seq_len: np.ndarray | None, nb: int, bound: int, name: str) -> np.ndarray | None:
    if seq_len is None:
        return None
    lengths = np.asarray(seq_len, dtype=np.int64).reshape(-1)
    if lengths.shape != (nb,) or np.any(lengths < 0) or np.any(lengths > bound):
        raise ValueError(f"sdpa: {name} must hold {nb} lengths in [0, {bound}]")
    return lengths


@attrs.frozen
class _Operands:
    """q, bias as [B, Hkv, G, Sq, *] views; k, v with padding zeroed; the masks."""

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray
    bias: np.ndarray | None
    masks: _Masks
    groups: int

    @classmethod
    def of(cls, q, k, v, bias, band: Band, seq_len_q, seq_len_kv) -> _Operands:
        groups = _check(q, k, v)
        nb, hq, sq, d = q.shape
        hkv, skv = k.shape[1], k.shape[2]
        lq = _lengths(seq_len_q, nb, sq, "seq_len_q")
        lkv = _lengths(seq_len_kv, nb, skv, "seq_len_kv")
        q5 = _zero_outside(q, lq).reshape(nb, hkv, groups, sq, d)
        if bias is not None:
            bias = np.broadcast_to(bias, (nb, hq, sq, skv)).reshape(nb, hkv, groups, sq, skv)
        masks = _Masks(band, lq, lkv, sq, skv)
        return cls(q5, _zero_outside(k, lkv), _zero_outside(v, lkv), bias, masks, groups)

    def scores(self, blk: _Block, attn_scale: float) -> tuple[np.ndarray, int, np.ndarray | None]:
        """(s [nb, nh, ng, r, keys] masked to -inf, keys, the mask) for one block."""
        keys = self.masks.keys(blk, self.k.shape[2])
        kb = self.k[blk.batches, blk.heads, None, :keys]
        s = np.matmul(self.q[blk.batches, blk.heads, blk.groups, blk.rows], kb.swapaxes(-1, -2))
        s *= attn_scale
        if self.bias is not None:
            s += self.bias[blk.batches, blk.heads, blk.groups, blk.rows, :keys]
        hidden = self.masks.hidden(blk, keys)
        if hidden is not None:
            np.copyto(s, -np.inf, where=hidden)
        return s, keys, hidden

    def values(self, blk: _Block, keys: int) -> np.ndarray:
        return self.v[blk.batches, blk.heads, None, :keys]


def _check(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> int:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"sdpa takes 4-d q, k, v; got {q.shape}, {k.shape}, {v.shape}")
    hq, hkv = q.shape[1], k.shape[1]
    if hkv == 0 or hq % hkv or k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[3] != k.shape[3]:
        raise ValueError(
            f"sdpa: q {q.shape}, k {k.shape}, v {v.shape} are not [B,Hq,Sq,D], [B,Hkv,Skv,D], [B,Hkv,Skv,Dv]"
        )
    return hq // hkv


def _grouped(x: np.ndarray, hkv: int, groups: int) -> np.ndarray:
    """[B, Hq, S, E] as [B, Hkv, G, S, E] (a view)."""
    return x.reshape(x.shape[0], hkv, groups, *x.shape[2:])


@ieee
def sdpa(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    attn_scale: float,
    bias: np.ndarray | None = None,
    causal: bool = False,
    generate_stats: bool = False,
    seq_len_q: np.ndarray | None = None,
    seq_len_kv: np.ndarray | None = None,
    band: Band | None = None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """(o [B, Hq, Sq, Dv], stats [B, Hq, Sq, 1] or None); ``band`` and ``causal`` both apply."""
    ops = _Operands.of(q, k, v, bias, (band or Band()).with_causal(causal), seq_len_q, seq_len_kv)
    nb, hq, sq, _ = q.shape
    hkv, skv, dv = k.shape[1], k.shape[2], v.shape[3]
    o = np.empty((nb, hq, sq, dv))
    stats = np.empty((nb, hq, sq, 1))
    o5, stats5 = _grouped(o, hkv, ops.groups), _grouped(stats, hkv, ops.groups)
    for blk in _blocks(nb, hkv, ops.groups, sq, skv):
        s, keys, _ = ops.scores(blk, attn_scale)
        m = np.max(s, axis=-1, keepdims=True, initial=-np.inf)
        s -= np.where(m == -np.inf, 0.0, m)
        np.exp(s, out=s)
        total = np.sum(s, axis=-1, keepdims=True)
        out = np.matmul(s, ops.values(blk, keys))
        out /= total
        where = (blk.batches, blk.heads, blk.groups, blk.rows)
        o5[where] = np.where(total == 0, 0.0, out)  # every score -inf: o = 0
        stats5[where] = np.where(m == np.inf, np.inf, m + np.log(total))
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
    seq_len_q: np.ndarray | None = None,
    seq_len_kv: np.ndarray | None = None,
    band: Band | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv) from the forward's o and stats, as cuDNN (and FlashAttention) define it.

    p = exp(s - stats); dv = p^T do; dp = do v^T; ds = p * (dp - rowsum(do * o));
    dq = attn_scale * ds k; dk = attn_scale * ds^T q. dk and dv sum over the G
    query heads that share each kv head. Masked scores have p = 0 whatever
    stats holds there, so padding rows contribute nothing and get dq = 0;
    padding keys get dk = dv = 0.
    """
    ops = _Operands.of(q, k, v, bias, (band or Band()).with_causal(causal), seq_len_q, seq_len_kv)
    nb, hq, sq, _ = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    groups = ops.groups
    do0 = _zero_outside(do, ops.masks.seq_len_q)
    delta = np.sum(do0 * _zero_outside(o, ops.masks.seq_len_q), axis=-1, keepdims=True)  # rowsum(dO * O)
    do5, delta5 = _grouped(do0, hkv, groups), _grouped(delta, hkv, groups)
    lse5 = _grouped(np.broadcast_to(stats, (nb, hq, sq, 1)), hkv, groups)
    dq = np.empty(q.shape)
    dk = np.zeros(k.shape)
    dv = np.zeros(v.shape)
    dq5 = _grouped(dq, hkv, groups)
    for blk in _blocks(nb, hkv, groups, sq, skv):
        where = (blk.batches, blk.heads, blk.groups, blk.rows)
        p, keys, hidden = ops.scores(blk, attn_scale)
        lse = lse5[where]
        p -= np.where(lse == -np.inf, 0.0, lse)
        np.exp(p, out=p)
        if hidden is not None:
            np.copyto(p, 0.0, where=hidden)  # whatever stats holds in a padding row
        nb_, nh, ng, r, _ = p.shape
        do_rows = do5[where]
        dv[blk.batches, blk.heads, :keys] += _contract(p, do_rows, (nb_, nh, ng * r))
        ds = np.matmul(do_rows, ops.values(blk, keys).swapaxes(-1, -2))  # dp, then d(q k^T) in place
        ds -= delta5[where]
        ds *= p
        ds *= attn_scale
        dq5[where] = np.matmul(ds, ops.k[blk.batches, blk.heads, None, :keys])
        dk[blk.batches, blk.heads, :keys] += _contract(ds, ops.q[where], (nb_, nh, ng * r))
    return dq, dk, dv


def _contract(a: np.ndarray, b: np.ndarray, lead: tuple[int, int, int]) -> np.ndarray:
    """sum over query heads and rows of a^T b: a [nb, nh, ng, r, keys], b [nb, nh, ng, r, e] -> [nb, nh, keys, e]."""
    a2 = a.reshape(*lead, a.shape[-1])
    b2 = b.reshape(*lead, b.shape[-1])
    return np.matmul(a2.swapaxes(-1, -2), b2)
