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

from sigdnn.plan_builders.reference.math.grouping import Grouped
from sigdnn.plan_builders.reference.math.normalization import Block, _plan, _sum_ab
from sigdnn.plan_builders.reference.math.parallel import ieee, parallel_map


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


@ieee
def softmax(x: np.ndarray, axes: Sequence[int], log: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(y, stats): softmax (log-softmax if ``log``) of float64 x over ``axes``; stats keepdims."""
    g = Grouped(x, tuple(axes))
    x3 = g.view
    k = g.dims[1]
    y3 = np.empty(g.dims)
    complete, blocks = _plan(g)
    m = np.empty(k)
    total = np.empty(k)
    log_sum = np.empty(k)

    def exp_shifted(blk: Block, out: np.ndarray) -> np.ndarray:
        np.subtract(x3[blk], _shift(m[blk[1]])[None, :, None], out=out)
        return np.exp(out, out=out)

    def finish(blk: Block, exps_in_y: bool) -> None:
        """y of a block once its sums are known (y3 holds exp(x - shift) already when exps_in_y)."""
        ks = blk[1]
        out = y3[blk]
        if log:
            np.subtract(x3[blk], _shift(m[ks])[None, :, None], out=out)
            out -= log_sum[ks][None, :, None]
            return
        if not exps_in_y:
            exp_shifted(blk, out)
        out /= total[ks][None, :, None]

    if complete:

        def block(blk: Block) -> None:
            ks = blk[1]
            m[ks] = _max_ab(x3[blk])
            sums = _sums(x3[blk], m[ks], exp_shifted(blk, y3[blk]))
            total[ks], log_sum[ks] = sums[0], _log_sum(m[ks], sums)
            finish(blk, exps_in_y=True)

        parallel_map(block, blocks)
    else:
        m[:] = np.max(parallel_map(lambda blk: _max_ab(x3[blk]), blocks), axis=0)
        parts = parallel_map(lambda blk: _sums(x3[blk], m, exp_shifted(blk, np.empty(x3[blk].shape))), blocks)
        sums = np.sum(parts, axis=0)
        total[:], log_sum[:] = sums[0], _log_sum(m, sums)
        parallel_map(lambda blk: finish(blk, exps_in_y=False), blocks)
    stats = np.where(m == np.inf, np.inf, m + log_sum)  # torch.logsumexp: +inf where an entry is +inf
    return g.restore(y3), g.stat(stats)
