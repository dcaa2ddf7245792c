"""Opening the files a user names, safely: regular files only, sizes capped before reading.

Paths reach sigdnn from users and from scripts fed by someone else. A FIFO
with no writer blocks ``open()`` forever, ``/dev/zero`` never ends, a sparse
file of terabytes reads until memory runs out: each is refused by its type or
its size from ``stat()`` before a byte is read, and the file is opened with
O_NONBLOCK so a FIFO swapped in after the check cannot block either. Every
failure is a :class:`FileError` that names the file and says what to do.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Callable, Iterable
from typing import BinaryIO

from sigdnn.errors import SigdnnError, UsageError
from sigdnn.io.units import format_bytes

PathArg = str | bytes | os.PathLike

_CHUNK = 1 << 24
_TAIL_CHUNK = 1 << 16  # read() allocates what it is asked for: keep the EOF probe small
_FLAGS = os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)

# What to do, by errno; the OS's own words come first in each message.
_ADVICE = {
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "a part of the path is a file, not a directory; check the path",
    errno.ELOOP: "the path goes round a loop of symbolic links; point it at a real file",
    errno.EACCES: "make it readable for this user (chmod) or copy it somewhere readable",
    errno.EPERM: "make it readable for this user (chmod) or copy it somewhere readable",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.ENXIO: "give a regular file",
}
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileError(SigdnnError):
    """A file could not be read or written as asked; the message names it and says what to do."""


def shown(path: str) -> str:
    """A path quoted on one line, whatever characters it holds (long ones shortened)."""
    text = repr(path)
    return text if len(text) <= 200 else text[:150] + "..." + text[-47:]


def check_path(path: PathArg, what: str) -> str:
    """The path as a str; FileError for a NUL byte or an empty path, UsageError for a non-path."""
    try:
        path = os.fsdecode(os.fspath(path))
    except Exception:  # a foreign __fspath__ may raise anything
        raise UsageError(f"{what}: expected a path (str or os.PathLike), got {type(path).__name__}") from None
    if "\0" in path:
        raise FileError(f"{what} {shown(path)}: the path contains a NUL byte; give a real file name")
    if not path:
        raise FileError(f"{what}: the path is empty; give a file name")
    return path


def os_error(what: str, path: str, e: OSError, verb: str = "cannot read") -> FileError:
    """An OSError as a FileError naming the file, with advice for the common errnos."""
    reason = e.strerror or type(e).__name__
    advice = _ADVICE.get(e.errno or 0)
    return FileError(f"{verb} {what} {shown(path)}: {reason}" + (f"; {advice}" if advice else ""))


def _not_regular(mode: int) -> str | None:
    """What a non-regular file is ("a directory", "a FIFO (named pipe)", ...); None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    return next((kind for test, kind in _KINDS if test(mode)), "not a regular file")


def open_regular_file(path: PathArg, *, what: str, max_bytes: int) -> tuple[str, BinaryIO, int]:
    """(path as str, an open binary file, its size) for a regular file of at most ``max_bytes`` bytes.

    Directories, FIFOs, devices and sockets are refused by their type and big
    files by their size before anything is read; the checks are repeated on
    the opened descriptor, in case the path changed in between.
    """
    path = check_path(path, what)
    try:
        st = os.stat(path)
    except OSError as e:
        raise os_error(what, path, e) from None
    _check_readable(st, what, path, max_bytes)
    try:
        fd = os.open(path, os.O_RDONLY | _FLAGS)
    except OSError as e:
        raise os_error(what, path, e) from None
    try:
        st = os.fstat(fd)
        _check_readable(st, what, path, max_bytes)
        return path, os.fdopen(fd, "rb"), st.st_size
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: PathArg, *, what: str, max_bytes: int) -> bytearray:
    """The whole content of a regular file of at most ``max_bytes`` bytes (see :func:`open_regular_file`).

    A file that grows past the cap while being read is refused too.
    """
    path, f, size = open_regular_file(path, what=what, max_bytes=max_bytes)
    with f:
        return read_all(f, size, what=what, path=path, max_bytes=max_bytes)


def _check_readable(st: os.stat_result, what: str, path: str, max_bytes: int) -> None:
    kind = _not_regular(st.st_mode)
    if kind == "a directory":
        raise FileError(f"{what} {shown(path)} is a directory; give a file inside it")
    if kind:
        raise FileError(f"{what} {shown(path)} is {kind}; sigdnn reads regular files only: save the data to a file")
    if st.st_size > max_bytes:
        raise FileError(_too_big(what, path, st.st_size, max_bytes))


def _too_big(what: str, path: str, size: int, max_bytes: int) -> str:
    return (
        f"{what} {shown(path)} is {format_bytes(size)}, over the {format_bytes(max_bytes)} limit; "
        "if you trust it, raise the limit (sigdnn: --max-file-bytes; Python: max_bytes=)"
    )


def read_all(f: BinaryIO, size: int, *, what: str, path: str, max_bytes: int) -> bytearray:
    """Read ``f`` to its end: ``size`` bytes (from fstat) first, then whatever was appended, up to the cap."""
    data = bytearray(size)
    view = memoryview(data)
    got = 0
    while got < size:
        try:
            n = f.readinto(view[got : got + _CHUNK])
        except OSError as e:
            raise os_error(what, path, e) from None
        if not n:  # shrank since fstat
            del view
            del data[got:]
            return data
        got += n
    del view
    while True:  # files whose stat size is 0 (/proc) or that grew since fstat
        try:
            chunk = f.read(min(_TAIL_CHUNK, max_bytes + 1 - len(data)))
        except OSError as e:
            raise os_error(what, path, e) from None
        if not chunk:
            return data
        data += chunk
        if len(data) > max_bytes:
            raise FileError(_too_big(what, path, len(data), max_bytes))


def write_file(path: PathArg, write: Callable[[BinaryIO], None], *, what: str) -> str:
    """Create or replace the regular file at ``path`` with what ``write`` writes, atomically; returns the path.

    The bytes go to a new file in the target's directory, are fsynced, and
    the new file is renamed over the target: a full disk, a killed process
    or an exception half way leaves the old file as it was and no torn file
    behind. A symbolic link is written through (the link stays, its target
    is replaced). Directories, FIFOs and devices are refused.
    """
    path = check_path(path, what)
    target = os.path.realpath(path) if os.path.islink(path) else path
    old_mode = None
    try:
        st = os.stat(target)
        _check_writable(st.st_mode, what, path)
        old_mode = stat.S_IMODE(st.st_mode)
    except FileNotFoundError:
        pass
    except OSError as e:
        raise os_error(what, path, e, "cannot write") from None
    parent = os.path.dirname(target) or "."
    if not os.path.isdir(parent):
        raise FileError(f"cannot write {what} {shown(path)}: directory {shown(parent)} does not exist; create it first")
    fd, temporary = _new_temporary(parent, os.path.basename(target), what, path)
    try:
        if old_mode is not None:
            os.fchmod(fd, old_mode)
        with os.fdopen(fd, "wb") as f:
            fd = -1
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, target)
    except BaseException as e:
        if fd >= 0:
            os.close(fd)
        _remove_quietly(temporary)
        if isinstance(e, OSError):
            raise FileError(
                f"cannot write {what} {shown(path)}: {e.strerror or e}; free space or choose another place"
            ) from None
        raise
    _sync_directory(parent)
    return path


def _new_temporary(parent: str, name: str, what: str, path: str) -> tuple[int, str]:
    """A new, empty file beside the target (created exclusively, with the umask's permissions)."""
    for _ in range(100):
        temporary = os.path.join(parent, f".{name[:200]}.{secrets.token_hex(6)}.tmp")
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FLAGS, 0o666), temporary
        except FileExistsError:
            continue
        except OSError as e:
            raise FileError(
                f"cannot write {what} {shown(path)}: {e.strerror or type(e).__name__}; choose a writable place"
            ) from None
    raise FileError(f"cannot write {what} {shown(path)}: no free temporary name in {shown(parent)}")


def _sync_directory(parent: str) -> None:
    """Make the rename durable; some file systems cannot open or sync a directory, which only costs durability."""
    with contextlib.suppress(OSError):
        fd = os.open(parent, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def same_file(a: PathArg, b: PathArg) -> bool:
    """Whether two paths name one file: through symbolic links, ``..`` and hard links (device and inode).

    A path that does not exist yet names the same file as another only when
    both resolve to one path.
    """
    try:
        first, second = os.stat(a), os.stat(b)
    except (OSError, ValueError):
        return os.path.realpath(a) == os.path.realpath(b)
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


def refuse_overwriting_inputs(output: PathArg, output_what: str, reads: Iterable[tuple[PathArg, str]]) -> None:
    """FileError when ``output`` is any file the command reads (``reads``: (path, what) pairs).

    Called before any work, so a mistyped option never replaces a graph or its inputs.
    """
    out = check_path(output, output_what)
    for path, what in reads:
        if same_file(out, path):
            same = "" if os.fspath(path) == out else f" ({shown(os.fsdecode(os.fspath(path)))})"
            raise FileError(
                f"{output_what} {shown(out)} is the {what}{same} this command reads; "
                "writing it would replace it: choose another output file"
            )


def _check_writable(mode: int, what: str, path: str) -> None:
    kind = _not_regular(mode)
    if kind == "a directory":
        raise FileError(
            f"{what} {shown(path)} is a directory; give a file name (e.g. {shown(os.path.join(path, 'out.safetensors'))})"
        )
    if kind:
        raise FileError(f"{what} {shown(path)} is {kind}; sigdnn writes regular files only: give a file name")


def _remove_quietly(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)
