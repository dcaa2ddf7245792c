"""scripts/mutation.py's verdicts: what a mutant's child process ending in each way counts as.

A child that dies of a signal (NumPy aborting on a heap the mutant corrupted) is a detected
mutant, as one past its time limit is; pytest's own failures kill, its harness errors do not.
"""

from __future__ import annotations

import faulthandler
import importlib.util
import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="the tool forks a child per mutant")


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("mutation_script", ROOT / "scripts" / "mutation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def test_exit_statuses_map_to_verdicts(mutation):
    verdict = mutation._verdict
    assert [verdict(s) for s in (0, 1, 2, 3, 4, 5)] == ["survived", "killed", "killed", "error", "error", "error"]
    assert verdict(-9) == "timeout"
    assert verdict(-6) == verdict(-11) == "crashed"  # SIGABRT, SIGSEGV
    assert set(mutation.KILLS) == {"killed", "timeout", "crashed"}
    assert {"survived", "error"}.isdisjoint(mutation.KILLS)


def abort() -> int:
    faulthandler.disable()  # pytest's would print the child's traceback on the terminal
    os.abort()


def test_child_statuses(mutation):
    assert mutation._in_child(lambda: 0, 30)[0] == 0
    assert mutation._in_child(lambda: 1, 30)[0] == 1
    assert mutation._in_child(lambda: 1 // 0, 30)[0] == 1  # an exception in the child is a failure
    assert mutation._in_child(abort, 30)[0] == -6
    status, seconds = mutation._in_child(lambda: time.sleep(30) or 0, 0.3)
    assert status == -9 and seconds < 10


MODULE = """\
def neg(x):
    return -x
"""

TEST = """\
import os

from crashy import neg


def test_neg():
    if neg(1) != -1:
        os.abort()  # a crash instead of a failure, as heap corruption would give
"""


def test_a_mutant_that_crashes_the_tests_is_killed(mutation, tmp_path, monkeypatch, capsys):
    """End to end: each mutant of neg() aborts the child running the test."""
    (tmp_path / "crashy.py").write_text(MODULE)
    (tmp_path / "test_crashy.py").write_text(TEST)
    monkeypatch.setattr(mutation, "ROOT", tmp_path)
    monkeypatch.chdir(tmp_path)  # as main() runs in ROOT: node ids are relative to it
    monkeypatch.syspath_prepend(str(tmp_path))
    outcomes = mutation.run_module(tmp_path / "crashy.py", [str(tmp_path / "test_crashy.py")])
    got = {o.mutant.id: o.status for o in outcomes}
    assert got == {"neg: -x -> x": "crashed", "neg: return -x -> return None": "crashed"}
    assert capsys.readouterr().out.strip() == "CC"  # one mark a mutant
    assert "crashy" not in sys.modules  # only the children imported it
