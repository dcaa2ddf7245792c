"""The GPU reference's scratch memory: one device buffer per context and thread, reused run after run.

A GPU reference plan makes float64 scratch arrays for each run (a conv's
input copy, im2col matrix and result: hundreds of MB at ResNet-50's sizes)
and waits for the device before it returns. Allocating and freeing them
through cuda.core cost a large conv about 0.3 ms of host time a run
(H100, 2026-12-06: 18 allocations in 3 runs, 1 ms of host time), as much
as some of its kernels. A run now takes its arrays from a buffer kept
between runs, one after another at 256-byte aligned offsets; a run that
needs more than the buffer holds gets fresh memory for the rest, and the
buffer grows to that run's need, at most ``KEPT_BYTES``, before the next
one. A run that raised before it waited for the device leaves the buffer
busy: the next run waits first.

Within a run nothing is handed out twice, so a run of many temporaries
needs the sum of them all: the cap keeps such a run's sum from being held
for good (validating a batch-64 ResNet-50 step grew an uncapped buffer to
31 GiB on an H100), and past it the arrays are the pool's, freed as they
die. The buffer lives as long as its context and no longer: each
``Executor`` has its own context, and validation makes a truth executor
per call.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

ALIGN = 256  # bytes: every array starts on a multiple (what the kernels' 16-byte views and the DMMA GEMM need)
KEPT_BYTES = 2 << 30  # the most a buffer keeps: a batch-64 ResNet-50 conv's run needs about 1.2 GB

_local = threading.local()


class Scratch:
    """One context's scratch buffer for one thread's runs."""

    def __init__(self, context: Any) -> None:
        # weakly: scratch_for's table is keyed weakly by the context, and a strong reference from its value would
        # keep both, and the buffer, alive for good
        self._context = weakref.ref(context)
        self._buffer: Any = None
        self._capacity = 0
        self._used = 0  # bytes handed out in this run (those past the capacity included)
        self._busy = False

    @property
    def capacity(self) -> int:
        return self._capacity

    @contextmanager
    def run(self) -> Iterator[Scratch]:
        """One run's arrays: reused memory, valid until the run ends; the run must wait for the device before it
        leaves the block (a plan's execute does), or the next run waits for it."""
        context = self._context()
        if self._busy:
            context.synchronize()
        grown = min(self._used, KEPT_BYTES)
        if grown > self._capacity:
            self._buffer = None  # (the old buffer freed before the larger one is made)
            self._buffer = context.allocate(grown)
            self._capacity = grown
        self._used = 0
        self._busy = True
        yield self
        self._busy = False

    def take(self, n: int, dtype: Any) -> Any:
        """A flat array of ``n`` elements of ``dtype`` (at least one)."""
        dtype = np.dtype(dtype)
        nbytes = max(n, 1) * dtype.itemsize
        offset = self._used
        self._used += -(-nbytes // ALIGN) * ALIGN
        context = self._context()
        if self._used <= self._capacity:
            return context.view(self._buffer, offset, (max(n, 1),), None, dtype)
        return context.empty((max(n, 1),), dtype)


def scratch_for(context: Any) -> Scratch:
    """This thread's scratch on ``context`` (kept while the context lives)."""
    by_context = getattr(_local, "by_context", None)
    if by_context is None:
        by_context = _local.by_context = weakref.WeakKeyDictionary()
    found = by_context.get(context)
    if found is None:
        found = by_context[context] = Scratch(context)
    return found
