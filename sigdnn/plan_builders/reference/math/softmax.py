"""Softmax and log-softmax over any set of axes, with the log-sum-exp statistics, in float64.

y = exp(x - max) / sum(exp(x - max)) and log y = (x - max) - log(sum(...)):
x - max is exact near the maximum (Sterbenz), so log-softmax keeps full
relative accuracy there, which x - (max + log sum) would lose to the
rounding of the sum. stats = max + log(sum) follows torch.logsumexp for
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


@ieee
def softmax(x: np.ndarray, axes: Sequence[int], log: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(y, stats): softmax (log-softmax if ``log``) of float64 x over ``axes``; stats keepdims."""
    g = Grouped(x, tuple(axes))
    x3 = g.view
    k = g.dims[1]
    y3 = np.empty(g.dims)
    complete, blocks = _plan(g)

    def exp_shifted(blk: Block, shift: np.ndarray, out: np.ndarray) -> np.ndarray:
        np.subtract(x3[blk], shift[blk[1]][None, :, None], out=out)
        return np.exp(out, out=out)

    def finish(blk: Block, shift: np.ndarray, total: np.ndarray, exps_in_y: bool) -> None:
        """y of a block from the shift and the sum of exps ( y3 already holds exp(x - shift) when exps_in_y)."""
        ks = blk[1]
        out = y3[blk]
        if log:
            np.subtract(x3[blk], shift[ks][None, :, None], out=out)
            out -= np.log(total[ks])[None, :, None]
            return
        if not exps_in_y:
            exp_shifted(blk, shift, out)
        out /= total[ks][None, :, None]

    if complete:
        m = np.empty(k)
        shift = np.empty(k)
        total = np.empty(k)

        def block(blk: Block) -> None:
            ks = blk[1]
            m[ks] = _max_ab(x3[blk])
            shift[ks] = _shift(m[ks])
            total[ks] = _sum_ab(exp_shifted(blk, shift, y3[blk]))
            finish(blk, shift, total, exps_in_y=True)

        parallel_map(block, blocks)
    else:
        m = np.max(parallel_map(lambda blk: _max_ab(x3[blk]), blocks), axis=0)
        shift = _shift(m)
        parts = parallel_map(lambda blk: _sum_ab(exp_shifted(blk, shift, np.empty(x3[blk].shape))), blocks)
        total = np.sum(parts, axis=0)
        parallel_map(lambda blk: finish(blk, shift, total, exps_in_y=False), blocks)
    stats = np.where(m == np.inf, np.inf, m + np.log(total))  # torch.logsumexp: +inf where an entry is +inf
    return g.restore(y3), g.stat(stats)
