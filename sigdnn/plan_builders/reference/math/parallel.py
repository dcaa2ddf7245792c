"""Run independent blocks of NumPy work on every core.

NumPy's elementwise loops and reductions run on one core, but release the
GIL while they loop; the memory-bound ops (normalizations, softmax) split
into cache-sized blocks therefore run about twice as fast on two cores when
the blocks go to a small thread pool, which is how torch runs them. The
blocks must be independent (each writes its own slice of the output).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

import numpy as np

T = TypeVar("T")
R = TypeVar("R")
P = ParamSpec("P")

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()
_inside = threading.local()


def workers() -> int:
    """Cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(1, workers() - 1), thread_name_prefix="sigdnn-ref")
        return _pool


def _run_group(fn: Callable[[T], R], group: list[T], errors: dict[str, str]) -> list[R]:
    previous = getattr(_inside, "active", False)
    _inside.active = True
    try:
        with np.errstate(**errors):  # a new thread starts with NumPy's default error handling
            return [fn(item) for item in group]
    finally:
        _inside.active = previous


def parallel_map(fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
    """[fn(item) for item in items], in order, the items split into one run of neighbours per core.

    The caller's thread takes the first run. Runs everything inline with one
    core, one item, or when called from inside a run (so nesting never waits
    on itself).
    """
    items = list(items)
    cores = workers()
    if len(items) <= 1 or cores == 1 or getattr(_inside, "active", False):
        return [fn(item) for item in items]
    runs = min(cores, len(items))
    bounds = [len(items) * i // runs for i in range(runs + 1)]
    groups = [items[bounds[i] : bounds[i + 1]] for i in range(runs)]
    pool = _get_pool()
    errors = np.geterr()
    futures = [pool.submit(_run_group, fn, group, errors) for group in groups[1:]]
    results = _run_group(fn, groups[0], errors)
    for future in futures:
        results.extend(future.result())
    return results


def ieee(fn: Callable[P, R]) -> Callable[P, R]:
    """Run fn with NumPy's floating-point warnings off: inf and NaN are values the reference
    computes on purpose (IEEE semantics), not errors to report."""

    @functools.wraps(fn)
    def quiet(*args: P.args, **kwargs: P.kwargs) -> R:
        with np.errstate(all="ignore"):
            return fn(*args, **kwargs)

    return quiet
