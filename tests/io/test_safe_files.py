"""sigdnn.io.files, graph_files and units: what may be opened, how much is read, and the messages.

Every refusal must come before the content is read (a FIFO would block, a
device or a sparse file would never end or fill memory), so these tests use
the real things: a FIFO, /dev/zero, a 3 GiB sparse file, a symlink loop.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from sigdnn.errors import SigdnnError, UsageError
from sigdnn.io import (
    FileError,
    GraphFormat,
    format_bytes,
    parse_bytes,
    read_graph_file,
    read_regular_file,
    write_file,
)


def refuse_open(monkeypatch: pytest.MonkeyPatch, path: Path, code: int) -> None:
    """Make os.open fail on ``path`` with ``code`` (tests run as root, where chmod 000 does not stop a read)."""
    real = os.open

    def fake(p: object, *args: object, **kw: object) -> int:
        if os.fspath(p) == str(path):  # type: ignore[arg-type]
            raise OSError(code, os.strerror(code), str(path))
        return real(p, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", fake)


def test_reads_a_regular_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "g.sdg"
    path.write_bytes(bytes(range(256)) * 1000)
    assert read_regular_file(path, what="graph file", max_bytes=1 << 20) == bytes(range(256)) * 1000


def test_reads_files_whose_stat_size_is_zero() -> None:
    data = read_regular_file("/proc/self/status", what="file", max_bytes=1 << 20)
    assert b"Name:" in data


def test_directory_is_refused_by_type(tmp_path: Path) -> None:
    with pytest.raises(FileError, match=r"graph file '.*' is a directory; give a file inside it"):
        read_regular_file(tmp_path, what="graph file", max_bytes=1 << 20)


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []
    worker = threading.Thread(target=lambda: _capture(outcome, fifo), daemon=True)
    worker.start()
    worker.join(timeout=5)
    assert not worker.is_alive(), "reading a FIFO with no writer blocked"
    assert isinstance(outcome[0], FileError) and "is a FIFO (named pipe)" in str(outcome[0])


def _capture(outcome: list[BaseException], path: Path) -> None:
    try:
        read_regular_file(path, what="graph file", max_bytes=1 << 20)
    except BaseException as e:
        outcome.append(e)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_devices_are_refused_by_type(device: str) -> None:
    with pytest.raises(FileError, match="is a character device"):
        read_regular_file(device, what="tensor file", max_bytes=1 << 20)


def test_sparse_file_is_refused_by_size_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "sparse.sdg"
    with path.open("wb") as f:
        f.truncate(3 << 30)
    with pytest.raises(FileError, match=r"is 3 GiB, over the 256 MiB limit; .*--max-file-bytes"):
        read_regular_file(path, what="graph file", max_bytes=256 << 20)


def test_symlink_loop_names_the_loop(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    with pytest.raises(FileError, match="loop of symbolic links"):
        read_regular_file(tmp_path / "a", what="graph file", max_bytes=100)


def test_symlink_to_a_regular_file_is_followed(tmp_path: Path) -> None:
    (tmp_path / "real").write_bytes(b"abc")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert read_regular_file(tmp_path / "link", what="f", max_bytes=100) == b"abc"


def test_unreadable_file_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "secret.sdg"
    path.write_bytes(b"x")
    refuse_open(monkeypatch, path, errno.EACCES)
    with pytest.raises(FileError, match=r"cannot read graph file '.*secret.sdg': Permission denied; make it readable"):
        read_regular_file(path, what="graph file", max_bytes=100)


@pytest.mark.parametrize(
    ("path", "message"),
    [("a\0b", "contains a NUL byte"), ("", "the path is empty"), ("missing.sdg", "No such file or directory")],
)
def test_odd_paths_are_file_errors(path: str, message: str) -> None:
    with pytest.raises(FileError, match=message):
        read_regular_file(path, what="graph file", max_bytes=100)


def test_a_non_path_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="expected a path"):
        read_regular_file(42, what="graph file", max_bytes=100)  # type: ignore[arg-type]


def test_messages_stay_on_one_line(tmp_path: Path) -> None:
    with pytest.raises(FileError) as info:
        read_regular_file(tmp_path / "new\nline", what="graph file", max_bytes=100)
    assert "\n" not in str(info.value) and "new\\nline" in str(info.value)


def test_write_file_writes_exactly_the_path(tmp_path: Path) -> None:
    target = tmp_path / "out_noext"
    assert write_file(target, lambda f: f.write(b"data"), what="--out file") == str(target)
    assert target.read_bytes() == b"data"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out_noext"]


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d, "is a directory; give a file name"),
        (lambda d: _fifo(d / "fifo"), r"is a FIFO \(named pipe\); sigdnn writes regular files only"),
        (lambda d: Path("/dev/null"), "is a character device"),
        (lambda d: d / "missing" / "out.safetensors", "directory '.*missing' does not exist; create it first"),
    ],
)
def test_write_file_refusals(tmp_path: Path, make: object, message: str) -> None:
    with pytest.raises(FileError, match=message):
        write_file(make(tmp_path), lambda f: f.write(b"x"), what="--out file")  # type: ignore[operator]


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def test_write_file_read_only_place(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "out.safetensors"
    real = os.open

    def fake(p: object, *args: object, **kw: object) -> int:
        if os.path.dirname(os.fspath(p)) == str(tmp_path):  # type: ignore[arg-type]
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(p))  # type: ignore[arg-type]
        return real(p, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", fake)
    with pytest.raises(FileError, match="Read-only file system; choose a writable place"):
        write_file(target, lambda f: f.write(b"x"), what="--out file")


def test_failed_write_removes_the_file_it_created(tmp_path: Path) -> None:
    def fail(f: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(FileError, match="No space left on device"):
        write_file(tmp_path / "out.npz", fail, what="--out file")
    assert not (tmp_path / "out.npz").exists()


def test_graph_file_without_a_converter_is_returned_as_read(tmp_path: Path) -> None:
    (tmp_path / "g.sdg").write_bytes(b"\x10\x00\x00\x00SDG1rest")
    assert read_graph_file(tmp_path / "g.sdg") == b"\x10\x00\x00\x00SDG1rest"


def test_graph_formats_plug_in(tmp_path: Path) -> None:
    upper = GraphFormat("shout", lambda data, path: path.endswith(".loud"), lambda data: data.lower())
    (tmp_path / "g.loud").write_bytes(b"ABC")
    (tmp_path / "g.sdg").write_bytes(b"ABC")
    assert read_graph_file(tmp_path / "g.loud", formats=[upper]) == b"abc"
    assert read_graph_file(tmp_path / "g.sdg", formats=[upper]) == b"ABC"


def test_graph_file_size_cap(tmp_path: Path) -> None:
    (tmp_path / "g.sdg").write_bytes(b"x" * 101)
    with pytest.raises(FileError, match="is 101 bytes, over the 100 bytes limit"):
        read_graph_file(tmp_path / "g.sdg", max_bytes=100)


def test_a_graph_file_past_the_default_256_mib_is_refused_by_its_size_naming_it_a_graph_file(tmp_path: Path) -> None:
    """The default cap (the CLI's help says 256 MiB) is checked on the file's size, before a byte is read."""
    big = tmp_path / "big.sdg"
    with big.open("wb") as f:
        f.truncate((256 << 20) + 1)  # sparse: nothing is written or read
    with pytest.raises(FileError, match=r"graph file .* over the 256 MiB limit"):
        read_graph_file(big)
    with pytest.raises(FileError, match="graph file"):
        read_graph_file(tmp_path / "missing.sdg")


def test_file_error_is_a_sigdnn_error() -> None:
    assert issubclass(FileError, SigdnnError)


@pytest.mark.parametrize(
    ("text", "value"),
    [("4096", 4096), ("512M", 512 << 20), ("4GiB", 4 << 30), ("4gb", 4 * 10**9), ("1.5K", 1536), ("1e9", 10**9)],
)
def test_parse_bytes(text: str, value: int) -> None:
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["", "-1", "1Q", "GiB", "1.2.3M"])
def test_parse_bytes_refuses_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match="is not a size"):
        parse_bytes(text)


@pytest.mark.parametrize(
    ("n", "text"), [(0, "0 bytes"), (1, "1 byte"), (1023, "1023 bytes"), (1536, "1.5 KiB"), (3 << 30, "3 GiB")]
)
def test_format_bytes(n: int, text: str) -> None:
    assert format_bytes(n) == text
