"""Every file sigdnn writes is replaced atomically, and no command writes over a file it reads (#32).

A write goes to a new file beside the target, is synced and renamed over it:
whatever stops the write half way (an exception, a full disk, a killed
process), the old file is still there, whole, and no torn file is left.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from sigdnn.io import FileError, refuse_overwriting_inputs, same_file, write_file


def _fail_half_way(f: object) -> None:
    f.write(b"torn")  # type: ignore[attr-defined]
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_leaves_the_old_file_whole_and_nothing_beside_it(tmp_path: Path) -> None:
    target = tmp_path / "out.npz"
    target.write_bytes(b"the user's results")
    with pytest.raises(FileError, match="No space left on device"):
        write_file(target, _fail_half_way, what="--out file")
    assert target.read_bytes() == b"the user's results"
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]


def test_an_exception_half_way_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "graph.sdg"
    target.write_bytes(b"old graph")

    def interrupted(f: object) -> None:
        f.write(b"new")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_file(target, interrupted, what="graph file")
    assert target.read_bytes() == b"old graph"
    assert [p.name for p in tmp_path.iterdir()] == ["graph.sdg"]


def test_a_killed_process_leaves_the_old_file_whole(tmp_path: Path) -> None:
    target = tmp_path / "inputs.safetensors"
    target.write_bytes(b"x" * 100_000)
    code = (
        "import os, signal, sys\n"
        "from sigdnn.io import write_file\n"
        "def write(f):\n"
        "    f.write(b'y' * 50_000); f.flush()\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "write_file(sys.argv[1], write, what='--out file')\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(target)], check=False)
    assert done.returncode == -signal.SIGKILL
    assert target.read_bytes() == b"x" * 100_000


def test_a_replaced_file_keeps_its_permissions_and_a_new_one_follows_the_umask(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.write_bytes(b"old")
    kept.chmod(0o640)
    write_file(kept, lambda f: f.write(b"new"), what="file")
    assert kept.read_bytes() == b"new" and (kept.stat().st_mode & 0o777) == 0o640
    old = os.umask(0o027)
    try:
        write_file(tmp_path / "fresh", lambda f: f.write(b"x"), what="file")
    finally:
        os.umask(old)
    assert (tmp_path / "fresh").stat().st_mode & 0o777 == 0o640
    old = os.umask(0o022)
    try:
        write_file(tmp_path / "plain", lambda f: f.write(b"x"), what="file")
    finally:
        os.umask(old)
    assert (tmp_path / "plain").stat().st_mode & 0o777 == 0o644  # rw for the owner, r for the rest, no x


def test_a_symbolic_link_is_written_through(tmp_path: Path) -> None:
    real = tmp_path / "real.sdg"
    real.write_bytes(b"old")
    link = tmp_path / "link.sdg"
    link.symlink_to(real)
    write_file(link, lambda f: f.write(b"new"), what="graph file")
    assert link.is_symlink() and real.read_bytes() == b"new"


@pytest.mark.parametrize(
    "spell",
    [
        lambda d: d / "g.sdg",
        lambda d: d / "sub" / ".." / "g.sdg",
        lambda d: d / "link.sdg",
        lambda d: d / "hard.sdg",
        lambda d: Path(os.path.relpath(d / "g.sdg")),
    ],
)
def test_same_file_sees_through_links_dots_and_hard_links(tmp_path: Path, spell: object) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "g.sdg").write_bytes(b"g")
    (tmp_path / "link.sdg").symlink_to(tmp_path / "g.sdg")
    os.link(tmp_path / "g.sdg", tmp_path / "hard.sdg")
    (tmp_path / "other.sdg").write_bytes(b"g")
    assert same_file(spell(tmp_path), tmp_path / "g.sdg")  # type: ignore[operator]
    assert not same_file(spell(tmp_path), tmp_path / "other.sdg")  # type: ignore[operator]


def test_same_file_of_paths_not_there_yet(tmp_path: Path) -> None:
    assert same_file(tmp_path / "new", tmp_path / "x" / ".." / "new")
    assert not same_file(tmp_path / "new", tmp_path / "newer")


def test_an_output_that_is_an_input_is_refused_naming_both(tmp_path: Path) -> None:
    graph = tmp_path / "a.sdg"
    graph.write_bytes(b"graph")
    (tmp_path / "alias").symlink_to(graph)
    reads = [(tmp_path / "inputs.npz", "--inputs file"), (graph, "graph file")]
    with pytest.raises(FileError, match=r"--out file '.*alias' is the graph file \('.*a.sdg'\) this command reads"):
        refuse_overwriting_inputs(tmp_path / "alias", "--out file", reads)
    refuse_overwriting_inputs(tmp_path / "out.npz", "--out file", reads)  # another file: fine
    assert graph.read_bytes() == b"graph"


def test_tuning_cache_write_is_atomic_and_its_read_never_blocks(tmp_path: Path) -> None:
    from sigdnn.executor.autotune import TuningCache

    path = tmp_path / "autotune.json"
    TuningCache(path).put("x", {"label": "a"})
    assert json.loads(path.read_text()) == {"x": {"label": "a"}}
    assert [p.name for p in tmp_path.iterdir()] == ["autotune.json"]
    path.unlink()
    os.mkfifo(path)  # a FIFO in the cache's place must not hang every tuned run
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(TuningCache(path).get("x")), daemon=True)
    reader.start()
    reader.join(10)
    assert got == [None]


def test_a_long_file_name_still_gets_a_temporary_beside_it(tmp_path: Path) -> None:
    target = tmp_path / ("n" * 250)
    write_file(target, lambda f: f.write(b"x"), what="file")
    assert target.read_bytes() == b"x" and [p.name for p in tmp_path.iterdir()] == [target.name]


def test_taken_temporary_names_are_skipped_and_exhaustion_is_a_file_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import secrets

    names = iter(["taken", "taken", "free"])
    monkeypatch.setattr(secrets, "token_hex", lambda n: next(names))
    (tmp_path / ".out.taken.tmp").write_bytes(b"someone else's")
    write_file(tmp_path / "out", lambda f: f.write(b"x"), what="file")
    assert (tmp_path / "out").read_bytes() == b"x"
    assert (tmp_path / ".out.taken.tmp").read_bytes() == b"someone else's"
    monkeypatch.setattr(secrets, "token_hex", lambda n: "taken")
    with pytest.raises(FileError, match="no free temporary name"):
        write_file(tmp_path / "out", lambda f: f.write(b"y"), what="file")
    assert (tmp_path / "out").read_bytes() == b"x"


def test_the_same_spelling_is_named_once(tmp_path: Path) -> None:
    graph = tmp_path / "g.sdg"
    graph.write_bytes(b"g")
    with pytest.raises(FileError, match=r"^--out file '.*g.sdg' is the graph file this command reads; writing it"):
        refuse_overwriting_inputs(str(graph), "--out file", [(str(graph), "graph file")])


def test_a_rename_that_fails_keeps_the_old_file_and_removes_the_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out"
    target.write_bytes(b"old")

    def refuse(*args: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(os, "replace", refuse)
    with pytest.raises(FileError, match=r"cannot write file '.*out': Invalid cross-device link"):
        write_file(target, lambda f: f.write(b"new"), what="file")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out"]
