"""CUDA-event timing shared by the GPU benchmarks: per-call milliseconds, their median over samples, and
interleaved samples of several implementations (every round times each in turn, so clock and thermal drift reach
all of them alike)."""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import torch


def time_ms(fn: Callable[[], Any], iters: int) -> float:
    """Per-call milliseconds of ``iters`` back-to-back calls (one sample) on torch's current stream."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def median_ms(fn: Callable[[], Any], iters: int = 10, repeats: int = 20, warmup: int = 1) -> float:
    """Median over ``repeats`` samples of ``time_ms`` (``iters`` back-to-back calls each), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    return statistics.median(time_ms(fn, iters) for _ in range(repeats))


def interleaved_samples(
    impls: dict[str, Callable[[], Any]], iters: int, repeats: int, warmup: int = 1
) -> dict[str, list[float]]:
    """``repeats`` samples of ``time_ms`` per implementation, after ``warmup`` calls of each."""
    for fn in impls.values():
        for _ in range(warmup):
            fn()
    torch.cuda.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in impls}
    for _ in range(repeats):
        for name, fn in impls.items():
            samples[name].append(time_ms(fn, iters))
    return samples
