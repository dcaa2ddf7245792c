"""sigdnn.io.files' exact edges: each errno's advice, each kind's name, long paths shortened, the size cap at
its boundary, descriptor flags (#32: the module's mutation score)."""

from __future__ import annotations

import errno
import fcntl
import os
import socket
from pathlib import Path

import pytest

from sigdnn.io import files
from sigdnn.io.files import FileError, read_regular_file, shown


@pytest.mark.parametrize(
    ("code", "advice"),
    [
        (errno.ENOENT, "check the path"),
        (errno.ENOTDIR, "a part of the path is a file, not a directory; check the path"),
        (errno.ELOOP, "the path goes round a loop of symbolic links; point it at a real file"),
        (errno.EPERM, "make it readable for this user (chmod) or copy it somewhere readable"),
        (errno.ENAMETOOLONG, "use a shorter path"),
        (errno.ENXIO, "give a regular file"),
    ],
)
def test_each_errno_gets_its_advice(code: int, advice: str) -> None:
    error = files.os_error("graph file", "g.sdg", OSError(code, os.strerror(code)))
    assert str(error) == f"cannot read graph file 'g.sdg': {os.strerror(code)}; {advice}"


def test_an_errno_without_advice_and_an_error_without_words() -> None:
    assert str(files.os_error("f", "p", OSError(errno.EIO, "I/O error"))) == "cannot read f 'p': I/O error"
    assert str(files.os_error("f", "p", OSError(), "cannot write")) == "cannot write f 'p': OSError"


def test_each_kind_of_file_is_named(tmp_path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "sock"))
    try:
        with pytest.raises(FileError, match=r"is a socket; sigdnn reads regular files only"):
            read_regular_file(tmp_path / "sock", what="graph file", max_bytes=100)
    finally:
        server.close()
    import stat

    assert files._not_regular(stat.S_IFBLK) == "a block device"
    assert files._not_regular(0) == "not a regular file"


def test_long_paths_are_shortened_to_their_two_ends() -> None:
    assert shown("a" * 198) == repr("a" * 198)  # 200 characters quoted: whole
    long = "b" * 100 + "m" * 100 + "e" * 100
    assert shown(long) == repr(long)[:150] + "..." + repr(long)[-47:]
    assert len(shown(long)) == 200 and shown(long).endswith("e" * 46 + "'")
    assert shown("c" * 199) == repr("c" * 199)[:150] + "..." + repr("c" * 199)[-47:]


def test_the_size_cap_is_inclusive(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 100)
    assert len(read_regular_file(tmp_path / "f", what="file", max_bytes=100)) == 100
    with pytest.raises(FileError, match="is 100 bytes, over the 99 bytes limit"):
        read_regular_file(tmp_path / "f", what="file", max_bytes=99)


def test_a_file_growing_past_the_cap_while_read_is_refused_and_one_reaching_it_is_not(tmp_path: Path) -> None:
    import io

    assert files.read_all(io.BytesIO(b"abcdef"), 3, what="f", path="p", max_bytes=6) == b"abcdef"
    with pytest.raises(FileError, match="is 6 bytes, over the 5 bytes limit"):
        files.read_all(io.BytesIO(b"abcdef"), 3, what="f", path="p", max_bytes=5)
    assert files.read_all(io.BytesIO(b"ab"), 3, what="f", path="p", max_bytes=6) == b"ab"  # shrank since fstat


def test_files_are_opened_non_blocking_and_close_on_exec(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x")
    _, f, _ = files.open_regular_file(tmp_path / "f", what="file", max_bytes=10)
    with f:
        assert fcntl.fcntl(f.fileno(), fcntl.F_GETFL) & os.O_NONBLOCK
        assert fcntl.fcntl(f.fileno(), fcntl.F_GETFD) & fcntl.FD_CLOEXEC
