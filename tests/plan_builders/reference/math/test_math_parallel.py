"""parallel_map: one run of neighbouring items per core, the caller's thread taking the first, in order."""

from __future__ import annotations

import os
import threading

import pytest

from sigdnn.plan_builders.reference.math import parallel
from sigdnn.plan_builders.reference.math.parallel import parallel_map


@pytest.fixture
def four_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """workers() says 4 (whatever this machine has), and a fresh pool is sized for that."""
    monkeypatch.setattr(parallel, "workers", lambda: 4)
    monkeypatch.setattr(parallel, "_pool", None)


def threads_of(n: int) -> list[int]:
    return parallel_map(lambda i: (i, threading.get_ident()), range(n))


def test_workers_is_the_cores_this_process_may_use(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parallel.workers() == len(os.sched_getaffinity(0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0} if pid == 0 else set(range(8)))
    assert parallel.workers() == 1  # this process's affinity (pid 0), not another's


@pytest.mark.parametrize(("cpu_count", "want"), [(3, 3), (None, 1)])
def test_workers_without_affinity_is_the_cpu_count(monkeypatch: pytest.MonkeyPatch, cpu_count, want: int) -> None:
    """Where os.sched_getaffinity does not exist (not Linux): os.cpu_count(), or 1 when it is unknown."""
    monkeypatch.delattr(os, "sched_getaffinity")
    monkeypatch.setattr(os, "cpu_count", lambda: cpu_count)
    assert parallel.workers() == want


def test_items_split_into_one_run_of_neighbours_per_core(four_cores: None) -> None:
    caller = threading.get_ident()
    for _ in range(2):  # and again: a finished call leaves the caller free to split the next one
        got = threads_of(11)
        assert [i for i, _ in got] == list(range(11))
        ident = [t for _, t in got]
        runs = [ident[0:2], ident[2:5], ident[5:8], ident[8:11]]  # bounds 11 * k // 4
        assert runs[0] == [caller, caller]
        assert all(len(set(run)) == 1 for run in runs)
        assert caller not in ident[2:]
        assert parallel._pool is not None and parallel._pool._max_workers == 3  # the caller is the fourth
        names = {t.name for t in threading.enumerate() if t.ident in ident[2:]}
        assert names and all(name.startswith("sigdnn-ref") for name in names)  # named for profilers


def test_two_cores_make_a_pool_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parallel, "workers", lambda: 2)
    monkeypatch.setattr(parallel, "_pool", None)
    ident = [t for _, t in threads_of(5)]
    assert parallel._pool is not None and parallel._pool._max_workers == 1
    assert ident[:2] == [threading.get_ident()] * 2 and len(set(ident[2:])) == 1  # bounds 0, 2, 5


def test_fewer_items_than_cores_give_one_run_each(four_cores: None) -> None:
    caller = threading.get_ident()
    for n in (2, 3):
        ident = [t for _, t in threads_of(n)]
        assert ident[0] == caller and caller not in ident[1:]


def test_one_item_one_core_or_a_nested_call_runs_inline(monkeypatch: pytest.MonkeyPatch) -> None:
    caller = threading.get_ident()
    monkeypatch.setattr(parallel, "_pool", None)
    monkeypatch.setattr(parallel, "workers", lambda: 4)
    assert [t for _, t in threads_of(1)] == [caller]
    assert parallel._pool is None  # no pool made for one item
    monkeypatch.setattr(parallel, "workers", lambda: 1)
    assert {t for _, t in threads_of(5)} == {caller}
    assert parallel._pool is None
    monkeypatch.setattr(parallel, "workers", lambda: 4)
    nested = parallel_map(lambda i: (threading.get_ident(), threads_of(3)), range(4))
    for outer, inner in nested:
        assert {t for _, t in inner} == {outer}  # inside a run, everything stays on that run's thread
