"""sigdnn.io.files when the system fails half way: read errors, short reads, files swapped between the
check and the open, a failed chmod, a closed stdin (#32: the module's mutation score).

Each failure must end in a FileError naming the file, with every descriptor it opened closed, no
temporary left and the old target whole; each read must return exactly the file's bytes.
"""

from __future__ import annotations

import errno
import io
import os
from pathlib import Path

import pytest

from sigdnn.io import files
from sigdnn.io.files import FileError, read_all, read_regular_file, write_file


def _closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError as e:
        return e.errno == errno.EBADF
    return False


class _Failing(io.RawIOBase):
    """A file whose reads fail with EIO once ``good`` bytes have been read (a bad disk sector)."""

    def __init__(self, content: bytes, good: int) -> None:
        self.content, self.good, self.pos = content, good, 0

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        if self.pos >= self.good:
            raise OSError(errno.EIO, "Input/output error")
        n = min(len(buffer), len(self.content) - self.pos)
        buffer[:n] = self.content[self.pos : self.pos + n]
        self.pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        if self.pos >= self.good:
            raise OSError(errno.EIO, "Input/output error")
        return b""


@pytest.mark.parametrize(("size", "good"), [(8, 0), (8, 8)], ids=["in the stat size", "past it"])
def test_a_read_error_is_a_file_error_naming_the_file(size: int, good: int) -> None:
    with pytest.raises(FileError, match=r"^cannot read graph file 'g.sdg': Input/output error$"):
        read_all(_Failing(b"x" * 8, good), size, what="graph file", path="g.sdg", max_bytes=100)


class _Trickle(io.RawIOBase):
    """A file that gives at most ``step`` bytes a call (a network file system), recording what is asked."""

    def __init__(self, content: bytes, step: int) -> None:
        self.content, self.step, self.pos, self.asked = content, step, 0, []

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        self.asked.append(len(buffer))
        n = min(len(buffer), self.step, len(self.content) - self.pos)
        buffer[:n] = self.content[self.pos : self.pos + n]
        self.pos += n
        return n

    def read(self, size: int = -1) -> bytes:
        self.asked.append(size)
        n = len(self.content) - self.pos if size < 0 else min(size, self.step, len(self.content) - self.pos)
        self.pos += n
        return self.content[self.pos - n : self.pos]


def test_reads_in_chunks_across_the_chunk_boundary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    content = bytes(range(251)) * 3  # 753 bytes: no period of 7
    monkeypatch.setattr(files, "_CHUNK", 7)
    path = tmp_path / "f"
    path.write_bytes(content)
    assert read_regular_file(path, what="file", max_bytes=1000) == content
    short = _Trickle(content, 5)  # fewer bytes than asked, every call
    assert read_all(short, len(content), what="f", path="p", max_bytes=1000) == content
    assert max(short.asked[:-1]) == 7  # each read asks for one chunk at most, the EOF probe aside


def test_the_eof_probe_asks_for_little_however_high_the_cap() -> None:
    """read() allocates what it is asked for: past the stat size a probe asks for at most 64 KiB."""
    stream = _Trickle(b"abc", 1 << 30)
    assert read_all(stream, 3, what="f", path="p", max_bytes=1 << 40) == b"abc"
    assert stream.asked == [3, 1 << 16]


def test_a_file_growing_without_end_is_read_one_byte_past_the_cap_and_no_further() -> None:
    cap = 100_000  # over the 64 KiB probe: the last probe is cut to the byte past the cap
    stream = _Trickle(b"z" * (1 << 20), 1 << 20)
    with pytest.raises(FileError, match=r"over the 97\.7 KiB limit"):
        read_all(stream, 10, what="f", path="p", max_bytes=cap)
    assert stream.pos == cap + 1
    assert stream.asked == [10, 1 << 16, cap + 1 - 10 - (1 << 16)]


def _swap_on_open(monkeypatch: pytest.MonkeyPatch, path: Path, swap: object) -> list[int]:
    """Run ``swap`` just before ``path`` is opened (someone replacing it after the stat); the fds opened."""
    real, opened = os.open, []

    def fake(p: object, flags: int, *args: object) -> int:
        if os.fspath(p) == str(path):  # type: ignore[arg-type]
            swap()  # type: ignore[operator]
            opened.append(real(p, flags, *args))  # type: ignore[arg-type]
            return opened[-1]
        return real(p, flags, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", fake)
    return opened


def test_a_file_grown_past_the_cap_between_stat_and_open_is_refused_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "g.sdg"
    path.write_bytes(b"x" * 10)
    opened = _swap_on_open(monkeypatch, path, lambda: path.write_bytes(b"x" * 1000))
    with pytest.raises(FileError, match=r"'.*g.sdg' is 1000 bytes, over the 100 bytes limit"):
        read_regular_file(path, what="graph file", max_bytes=100)
    assert len(opened) == 1 and _closed(opened[0])


def test_a_fifo_swapped_in_between_stat_and_open_is_refused_and_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "g.sdg"
    path.write_bytes(b"x")

    def swap() -> None:
        path.unlink()
        os.mkfifo(path)

    opened = _swap_on_open(monkeypatch, path, swap)
    with pytest.raises(FileError, match=r"is a FIFO \(named pipe\); sigdnn reads regular files only"):
        read_regular_file(path, what="graph file", max_bytes=100)
    assert len(opened) == 1 and _closed(opened[0])


def test_a_bare_file_name_is_written_in_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert write_file("out.npz", lambda f: f.write(b"data"), what="--out file") == "out.npz"
    assert (tmp_path / "out.npz").read_bytes() == b"data"
    assert [p.name for p in tmp_path.iterdir()] == ["out.npz"]


def test_a_target_under_a_file_is_refused_with_the_system_reason(tmp_path: Path) -> None:
    (tmp_path / "file").write_bytes(b"x")
    with pytest.raises(FileError, match=r"^cannot write --out file '.*out': Not a directory; a part of the path"):
        write_file(tmp_path / "file" / "out", lambda f: f.write(b"y"), what="--out file")
    assert [p.name for p in tmp_path.iterdir()] == ["file"]


def _refuse_fchmod(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make os.fchmod fail (some network and FUSE file systems refuse it); the fds it was given."""
    given: list[int] = []

    def refuse(fd: int, mode: int) -> None:
        given.append(fd)
        raise OSError(errno.EPERM, "Operation not permitted")

    monkeypatch.setattr(os, "fchmod", refuse)
    return given


def test_a_failed_chmod_closes_and_removes_the_temporary_and_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out"
    target.write_bytes(b"old")
    given = _refuse_fchmod(monkeypatch)
    with pytest.raises(FileError, match=r"cannot write file '.*out': Operation not permitted"):
        write_file(target, lambda f: f.write(b"new"), what="file")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out"]
    assert len(given) == 1 and _closed(given[0])


def test_a_failed_chmod_closes_a_temporary_on_descriptor_zero(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process started with stdin closed gets descriptor 0 for its first open: it is closed like any other."""
    target = tmp_path / "out"
    target.write_bytes(b"old")
    given = _refuse_fchmod(monkeypatch)
    saved = os.dup(0)
    try:
        os.close(0)
        with pytest.raises(FileError, match="Operation not permitted"):
            write_file(target, lambda f: f.write(b"new"), what="file")
        assert given == [0] and _closed(0)
    finally:
        os.dup2(saved, 0)
        os.close(saved)
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_failed_write_closes_only_its_own_descriptor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The file object owns the temporary's descriptor once made: the failure path closes nothing else by number."""
    seen: list[int] = []
    real_close = os.close
    monkeypatch.setattr(os, "close", lambda fd: seen.append(fd))
    temporary: list[int] = []

    def fail(f: object) -> None:
        temporary.append(f.fileno())  # type: ignore[attr-defined]
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(FileError, match="No space left on device"):
        write_file(tmp_path / "out", fail, what="file")
    monkeypatch.setattr(os, "close", real_close)
    assert seen == [] and _closed(temporary[0])
    assert list(tmp_path.iterdir()) == []
