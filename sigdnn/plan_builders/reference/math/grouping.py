"""A tensor seen as (A, K, B): per-K statistics over A and B, in x's own memory order.

Normalizations, softmax and reductions compute one statistic per "kept"
index over the "reduced" axes. Whatever the layout, memory order usually
reads reduced / kept / reduced (batchnorm NCHW: N | C | HW; NHWC: NHW | C;
layernorm: - | rows | features), so x transposed into memory order and
reshaped to (A, K, B) is a view, and cache-sized blocks of it are plain
slices. Layouts that interleave the groups more than that are copied once
into (kept, reduced) order. Size-1 axes belong to whichever group is
convenient: they change no value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from sigdnn.plan_builders.reference.math.sink import Sink


class Grouped:
    """The (A, K, B) view of ``x`` for statistics over the ``reduced`` axes, and the way back."""

    def __init__(self, x: np.ndarray, reduced: Sequence[int]) -> None:
        self.shape = x.shape
        ndim = x.ndim
        red = {a % ndim for a in reduced} if ndim else set()
        real = [a for a in range(ndim) if x.shape[a] != 1]
        order = sorted(real, key=lambda a: (-abs(x.strides[a]), a))
        runs: list[tuple[bool, list[int]]] = []
        for a in order:
            if runs and runs[-1][0] == (a in red):
                runs[-1][1].append(a)
            else:
                runs.append((a in red, [a]))
        kinds = [kind for kind, _ in runs]
        axes = [run for _, run in runs]
        first: list[int] = []
        kept: list[int] = []
        last: list[int] = []
        if kinds == [True]:
            last = axes[0]
        elif kinds == [False]:
            kept = axes[0]
        elif kinds == [True, False]:
            first, kept = axes
        elif kinds == [False, True]:
            kept, last = axes
        elif kinds == [True, False, True]:
            first, kept, last = axes
        elif kinds:  # kept and reduced interleave: one copy into (kept, reduced) order
            kept, last = [a for a in real if a not in red], [a for a in real if a in red]
        ones = [a for a in range(ndim) if x.shape[a] == 1]
        self.perm = (*first, *kept, *ones, *last)
        self.inverse = tuple(np.argsort(self.perm)) if ndim else ()
        self.groups = ((0, len(first)), (len(first), len(first) + len(kept) + len(ones)), (ndim - len(last), ndim))
        self.transposed = tuple(x.shape[a] for a in self.perm)
        self.dims = tuple(math.prod(self.transposed[lo:hi]) for lo, hi in self.groups)
        self.view = x.transpose(self.perm).reshape(self.dims)

    @property
    def count(self) -> int:
        """Elements each statistic reduces (A * B)."""
        return self.dims[0] * self.dims[2]

    def restore(self, a3: np.ndarray) -> np.ndarray:
        """An (A, K, B) result as an array of x's logical shape (a view)."""
        return a3.reshape(self.transposed).transpose(self.inverse)

    def stat(self, per_k: np.ndarray) -> np.ndarray:
        """A per-K statistic (K,) shaped like x with 1 on every reduced axis."""
        keep = [d if lo_hi == 1 else 1 for lo_hi, (lo, hi) in enumerate(self.groups) for d in self.transposed[lo:hi]]
        return np.ascontiguousarray(per_k.reshape(keep).transpose(self.inverse))

    def param(self, p: np.ndarray) -> np.ndarray:
        """An array broadcastable to x, as (A|1, K|1, B|1) broadcastable to the view.

        A group whose dims are all 1 in p stays 1; one where p varies is
        expanded to x's full extent there (a small copy at most: p's own size
        times the broadcast within the group).
        """
        p = np.asarray(p, dtype=np.float64)
        p = p.reshape((1,) * (len(self.shape) - p.ndim) + p.shape).transpose(self.perm)
        target, dims3 = [], []
        for lo, hi in self.groups:
            if all(d == 1 for d in p.shape[lo:hi]):
                target += [1] * (hi - lo)
                dims3.append(1)
            else:
                target += self.transposed[lo:hi]
                dims3.append(math.prod(self.transposed[lo:hi]))
        return np.broadcast_to(p, target).reshape(dims3)

    def regroup(self, a: np.ndarray) -> np.ndarray | None:
        """An array of x's logical shape seen through x's (A, K, B) grouping, as a view; None when a's
        strides make that a copy (a result written through it would be lost)."""
        try:
            return a.transpose(self.perm).reshape(self.dims, copy=False)
        except ValueError:
            return None


class Result:
    """Where a grouped computation puts its (A, K, B) result, block by block.

    Given a Sink whose array regroups as a view, each block is computed in a
    float64 block temporary and rounded straight into the sink (no float64
    copy of the whole result); otherwise blocks are computed in place in one
    float64 array, which ``finish`` stores into the sink or returns.
    """

    def __init__(self, g: Grouped, sink: Sink | None) -> None:
        self._g = g
        self._sink = sink
        self._direct = g.regroup(sink.array) if sink is not None else None
        self._full = np.empty(g.dims) if self._direct is None else None

    def block(self, blk: Any) -> np.ndarray:
        """A float64 array to compute block ``blk`` in (the full result's block, or a new block temporary)."""
        if self._full is not None:
            return self._full[blk]
        assert self._direct is not None
        return np.empty(self._direct[blk].shape)

    def scratch(self, blk: Any, xb: np.ndarray, fresh: bool) -> np.ndarray:
        """Like ``block``, but xb itself when it is a fresh widened copy of the input's block (``fresh``)
        that the caller reads no more once it starts writing: one block of float64 in cache, not two."""
        return xb if fresh and self._full is None else self.block(blk)

    def done(self, blk: Any, values: np.ndarray) -> None:
        """Block ``blk`` holds its final float64 values: round them into the sink when writing directly."""
        if self._direct is not None:
            assert self._sink is not None
            self._sink.store(self._direct[blk], values)

    def done_by(self, blk: Any, ufunc: np.ufunc, a: np.ndarray, b: np.ndarray) -> None:
        """The block's last step, a = ufunc(a, b), and its rounding into the sink in one pass where the
        sink's store is NumPy's cast: the ufunc computes in float64 and its output cast rounds each
        value once, as the store would."""
        if self._direct is not None and self._sink is not None and self._sink.casts:
            ufunc(a, b, out=self._direct[blk], casting="unsafe")
            return
        ufunc(a, b, out=a)
        self.done(blk, a)

    def finish(self) -> np.ndarray | None:
        """The float64 result in x's logical shape without a sink; None once the sink holds it."""
        if self._full is None:
            return None
        y = self._g.restore(self._full)
        if self._sink is None:
            return y
        self._sink.store(self._sink.array, y)
        return None
