"""The GPU reference's kept scratch buffer (gpu_reference/scratch.py) on the cuTile tests' host-backed context.

A run's arrays come one after another from one buffer at 256-byte aligned offsets; what a run needs past the
buffer is allocated fresh and the buffer grows to that need, at most KEPT_BYTES, before the next run; a run that
raised leaves the buffer busy, so the next one waits for the device first; the buffer dies with its context. ``run_on`` hands a run's Gpu its scratch and ends the
run only once both the run's stream and the context's have finished.
"""

from __future__ import annotations

import sys
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest

from sigdnn.plan_builders.gpu_reference import backend
from sigdnn.plan_builders.gpu_reference import scratch as scratch_module
from sigdnn.plan_builders.gpu_reference.scratch import ALIGN, Scratch, scratch_for

sys.path.append(str(Path(__file__).resolve().parents[1] / "cutile"))
from emulated import HostGpuContext


class Counting(HostGpuContext):
    """Counts allocations (HostGpuContext's), host waits and cross-stream waits."""

    def __init__(self) -> None:
        super().__init__()
        self.syncs = 0
        self.waits: list[int] = []

    def synchronize(self) -> None:
        self.syncs += 1

    def wait_for(self, foreign: int) -> None:
        self.waits.append(foreign)


def test_a_run_takes_aligned_arrays_and_the_next_run_reuses_one_buffer_grown_to_that_need() -> None:
    context = Counting()
    scratch = Scratch(context)
    with scratch.run():
        first = [scratch.take(n, dt) for n, dt in ((10, np.float64), (0, np.int64), (300, np.float32))]
    assert context.allocations == 3 and scratch.capacity == 0  # nothing kept yet: each array its own
    assert [a.shape for a in first] == [(10,), (1,), (300,)] and first[2].dtype == np.float32
    with scratch.run():
        second = [scratch.take(n, dt) for n, dt in ((10, np.float64), (0, np.int64), (300, np.float32))]
    assert context.allocations == 4 and scratch.capacity == 256 + 256 + 1280  # one buffer, as the first run needed
    base = second[0].ptr
    assert [a.ptr - base for a in second] == [0, 256, 512] and [a.shape for a in second] == [(10,), (1,), (300,)]
    assert all(a.ptr % ALIGN == base % ALIGN for a in second)
    with scratch.run():
        third = [scratch.take(n, dt) for n, dt in ((10, np.float64), (0, np.int64), (300, np.float32))]
    assert context.allocations == 4 and [a.ptr for a in third] == [a.ptr for a in second]  # the same memory again


def test_a_run_needing_more_gets_fresh_memory_for_the_rest_then_a_larger_buffer() -> None:
    context = Counting()
    scratch = Scratch(context)
    with scratch.run():
        scratch.take(32, np.float64)
    with scratch.run():
        kept = scratch.take(32, np.float64)
        past = scratch.take(64, np.float64)  # beyond the 256-byte buffer
    assert context.allocations == 3 and past.ptr != kept.ptr + 256
    with scratch.run():
        a, b = scratch.take(32, np.float64), scratch.take(64, np.float64)
    assert context.allocations == 4 and scratch.capacity == 768 and b.ptr - a.ptr == 256


def test_the_buffer_grows_to_its_cap_and_no_further(monkeypatch: pytest.MonkeyPatch) -> None:
    """A run needing more than KEPT_BYTES leaves a buffer of KEPT_BYTES: later runs take what fits from it and
    the rest fresh, and the buffer is not made again."""
    monkeypatch.setattr(scratch_module, "KEPT_BYTES", 1024)
    context = Counting()
    scratch = Scratch(context)
    for _ in range(2):
        with scratch.run():
            arrays = [scratch.take(64, np.float64) for _ in range(3)]  # 512 bytes each: 1536 in all
    assert scratch.capacity == 1024 and context.allocations == 3 + 2  # three fresh, then the buffer and one fresh
    assert arrays[1].ptr - arrays[0].ptr == 512 and arrays[2].ptr != arrays[0].ptr + 1024
    with scratch.run():
        again = [scratch.take(64, np.float64) for _ in range(3)]
    assert scratch.capacity == 1024 and context.allocations == 6 and again[0].ptr == arrays[0].ptr


def test_a_context_dropped_by_its_callers_is_freed_with_its_scratch() -> None:
    """The table of scratches holds neither the context nor its buffer: a validation makes a truth executor (and
    context) per call, and each call's buffer kept alive ran the next call out of memory (H100, batch-64 ResNet-50
    training step)."""
    context = Counting()
    gone = weakref.ref(context)
    scratch = scratch_for(context)
    for _ in range(2):
        with scratch.run():
            scratch.take(64, np.float64)
    assert scratch.capacity == 512
    buffer = weakref.ref(scratch._buffer.memory)
    del context, scratch
    assert gone() is None and buffer() is None


def test_the_old_buffer_is_freed_before_the_larger_one_is_made() -> None:
    """Growing frees first: the device never holds both buffers (a run's need may be most of its memory)."""

    class Freeing(Counting):
        def __init__(self) -> None:
            super().__init__()
            self.made: list[weakref.ref] = []
            self.alive_at_allocation: list[int] = []

        def allocate(self, nbytes: int):
            self.alive_at_allocation.append(sum(ref() is not None for ref in self.made))
            buffer = Buffer(super().allocate(nbytes))
            self.made.append(weakref.ref(buffer))
            return buffer

    class Buffer:  # (HostGpuContext's SimpleNamespace takes no weak reference)
        def __init__(self, inner) -> None:
            self.handle, self.size, self.memory = inner.handle, inner.size, inner.memory

    context = Freeing()
    scratch = Scratch(context)
    for need in (1, 64, 512):
        with scratch.run():
            scratch.take(need, np.float64)
    with scratch.run():
        pass
    # a fresh array (dropped at once), the kept buffer, a fresh one past it; the buffer grown, a fresh one past it;
    # the buffer grown: each growth finds nothing else alive
    assert context.alive_at_allocation == [0, 0, 1, 0, 1, 0]


def test_the_arrays_are_the_buffers_memory() -> None:
    context = Counting()
    scratch = Scratch(context)
    with scratch.run():
        scratch.take(4, np.float64)
    with scratch.run():
        a, b = scratch.take(4, np.float64), scratch.take(4, np.float64)
        context._copy_h2d(a.ptr, np.arange(4.0))
        context._copy_h2d(b.ptr, np.arange(4.0) + 10)
        np.testing.assert_array_equal(context.to_host(a), [0, 1, 2, 3])
        np.testing.assert_array_equal(context.to_host(b), [10, 11, 12, 13])


def test_a_run_that_raised_makes_the_next_wait_for_the_device() -> None:
    context = Counting()
    scratch = Scratch(context)
    with scratch.run():
        pass
    assert context.syncs == 0
    with pytest.raises(RuntimeError), scratch.run():
        raise RuntimeError("a launch failed")
    with scratch.run():
        assert context.syncs == 1
    with scratch.run():
        assert context.syncs == 1


def test_each_thread_keeps_its_own_scratch_per_context() -> None:
    one, two = Counting(), Counting()
    assert scratch_for(one) is scratch_for(one) and scratch_for(one) is not scratch_for(two)
    found = []
    thread = threading.Thread(target=lambda: found.append(scratch_for(one)))
    thread.start()
    thread.join()
    assert found[0] is not scratch_for(one)


@pytest.mark.parametrize(("stream", "waits"), [(None, []), (0, []), (77, [77])])
def test_run_on_hands_its_gpu_the_scratch_and_waits_for_the_runs_stream(monkeypatch, stream, waits) -> None:
    """(The host-backed context's own stream is 0: a run on another stream makes the context wait for it.)"""
    monkeypatch.setattr(backend, "is_emulated", lambda context: False)
    monkeypatch.setattr(backend, "kernel_module", lambda emulated: None)
    context = Counting()
    with backend.run_on(context, stream) as gpu:
        assert gpu.scratch is scratch_for(context) and context.syncs == 0
        gpu.empty(8, np.float64)
    assert context.waits == waits and context.syncs == 1
    with backend.run_on(context, stream) as gpu:
        array = gpu.empty(8, np.float64)
    assert context.allocations == 2 and array.shape == (8,)  # the first run's own array, then the kept buffer


def test_an_emulated_run_takes_no_scratch() -> None:
    context = HostGpuContext()  # its kernels are emulated: arrays are NumPy's
    with backend.run_on(context, None) as gpu:
        assert gpu.scratch is None and isinstance(gpu.empty(3, np.float64), np.ndarray)
    assert context.allocations == 0
