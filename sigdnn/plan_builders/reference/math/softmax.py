"""Softmax and log-softmax over any set of axes, with the log-sum-exp statistics, in float64.

y = exp(x - max) / sum(exp(x - max)) and log y = (x - max) - log(sum(...)):
x - max is exact near the maximum (Sterbenz), and log(sum) is log1p of the
sum without the max's own 1, so log-softmax keeps full relative accuracy
even for an entry that takes nearly all the mass (log y ~ -1e-10), where
log of the rounded sum would be off by EPS absolute and x - (max + log sum)
would lose more. stats = max + log(sum) follows torch.logsumexp for
infinite maxima (a row of -inf gives -inf, one holding +inf gives +inf;
y is NaN in both, as torch gives). Cache-sized blocks of rows run on every core (see normalization.py
for the (A, K, B) grouping they share).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sigdnn.plan_builders.reference.math.grouping import Grouped, Result
from sigdnn.plan_builders.reference.math.normalization import Block, _plan, _sum_ab
from sigdnn.plan_builders.reference.math.parallel import ieee, parallel_map
from sigdnn.plan_builders.reference.math.sink import Sink, wide


def _max_ab(a: np.ndarray) -> np.ndarray:
    return np.maximum.reduce(np.maximum.reduce(a, axis=2), axis=0)


def _shift(m: np.ndarray) -> np.ndarray:
    """What exp's argument is shifted by: the max, or 0 where the max is -inf (every entry -inf), so
    that such a row sums to 0 (stats -inf, y = 0/0 = NaN as torch gives) instead of NaN."""
    return np.where(m == -np.inf, 0.0, m)


def _sums(x: np.ndarray, m: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Per K of an (A, k, B) block: [sum(e), sum(e) over entries below the max, count of maxima].

    sum(e) = 1 + rest with rest = (the second) + (maxima - 1), and log1p(rest) is
    the log-sum accurate relative to itself even when tiny (one dominant
    entry), where log of the rounded sum would be off by EPS absolute.
    """
    below = x < m[None, :, None]
    under = np.add.reduce(np.add.reduce(e, axis=2, where=below), axis=0)
    maxima = x.shape[0] * x.shape[2] - np.add.reduce(np.add.reduce(below, axis=2), axis=0)
    return np.stack([_sum_ab(e), under, maxima.astype(np.float64)])


def _log_sum(m: np.ndarray, sums: np.ndarray) -> np.ndarray:
    """log(sum(exp(x - m))) from _sums' (combined) sums: log1p(rest) where the max is finite, else log(sum)."""
    total, under, maxima = sums
    return np.where(np.isfinite(m), np.log1p(under + (maxima - 1)), np.log(total))


def _rows(x2: np.ndarray, y2: np.ndarray, log: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each row of x2 (k, B) into y2 as x - max (log) or exp(x - max), all but the last step (- log_sum,
    / total: the caller's, fused with the rounding); returns the rows' max, sum of exps and log-sum.

    One maximum per row is found with argmax; its exp (exactly 1 for a finite
    max) is left out of the sum for log1p, then put back: five passes over
    the block, where a mask of the maxima would take eight.
    """
    rows = np.arange(x2.shape[0])
    top = np.argmax(x2, axis=1)  # the first NaN, if any: NaN propagates as with max
    m = x2[rows, top]
    d = np.subtract(x2, _shift(m)[:, None], out=y2)
    e = np.exp(d) if log else np.exp(d, out=d)
    one = e[rows, top]
    e[rows, top] = 0.0
    rest = np.add.reduce(e, axis=1)
    e[rows, top] = one
    total = rest + one
    log_sum = np.where(np.isfinite(m), np.log1p(rest), np.log(total))
    return m, total, log_sum


@ieee
def softmax(
    x: np.ndarray, axes: Sequence[int], log: bool = False, y: Sink | None = None
) -> tuple[np.ndarray | None, np.ndarray]:
    """(y, stats): softmax (log-softmax if ``log``) of x over ``axes``; stats keepdims.

    x may be float16 / float32: each block is widened exactly to float64 where
    it is read. With a Sink, y goes block by block into it (rounded once)
    and comes back None.
    """
    g = Grouped(x, tuple(axes))
    x3 = g.view
    k = g.dims[1]
    result = Result(g, y)
    fresh = x3.dtype != np.float64  # wide() copies each block
    complete, blocks = _plan(g)
    m = np.empty(k)
    total = np.empty(k)
    log_sum = np.empty(k)

    def exp_shifted(xb: np.ndarray, ks: slice, out: np.ndarray) -> np.ndarray:
        np.subtract(xb, _shift(m[ks])[None, :, None], out=out)
        return np.exp(out, out=out)

    def last_step(blk: Block, out: np.ndarray) -> None:
        """out holds x - shift (log) or exp(x - shift): - log_sum or / total, rounded into y."""
        ks = blk[1]
        if log:
            result.done_by(blk, np.subtract, out, log_sum[ks][None, :, None])
        else:
            result.done_by(blk, np.divide, out, total[ks][None, :, None])

    def finish(blk: Block, xb: np.ndarray, out: np.ndarray, exps_in_out: bool) -> None:
        """y of a block once its sums are known (out holds exp(x - shift) already when exps_in_out)."""
        if log:
            np.subtract(xb, _shift(m[blk[1]])[None, :, None], out=out)
        elif not exps_in_out:
            exp_shifted(xb, blk[1], out)
        last_step(blk, out)

    if complete and g.dims[0] == 1:

        def rows_block(blk: Block) -> None:
            ks = blk[1]
            x2 = wide(x3[blk])  # (1, k, B)
            out = result.scratch(blk, x2, fresh)  # _rows reads x2 no more once it writes y
            m[ks], total[ks], log_sum[ks] = _rows(x2[0], out[0], log)
            last_step(blk, out)

        parallel_map(rows_block, blocks)
    elif complete:

        def block(blk: Block) -> None:
            ks = blk[1]
            xb = wide(x3[blk])
            m[ks] = _max_ab(xb)
            out = result.block(blk)
            sums = _sums(xb, m[ks], exp_shifted(xb, ks, out))
            total[ks], log_sum[ks] = sums[0], _log_sum(m[ks], sums)
            finish(blk, xb, out, exps_in_out=True)

        parallel_map(block, blocks)
    else:
        m[:] = np.max(parallel_map(lambda blk: _max_ab(wide(x3[blk])), blocks), axis=0)

        def sums(blk: Block) -> np.ndarray:
            xb = wide(x3[blk])
            return _sums(xb, m, exp_shifted(xb, slice(None), np.empty(xb.shape)))

        summed = np.sum(parallel_map(sums, blocks), axis=0)
        total[:], log_sum[:] = summed[0], _log_sum(m, summed)
        parallel_map(lambda blk: finish(blk, wide(x3[blk]), result.block(blk), exps_in_out=False), blocks)
    stats = np.where(m == np.inf, np.inf, m + log_sum)  # torch.logsumexp: +inf where an entry is +inf
    return result.finish(), g.stat(stats)
