"""Where a campaign's results go: JSON lines written as cases finish, and replayable failing cases.

``results.jsonl`` gets one row per case the moment it finishes (flushed), so
a campaign killed at any point keeps every finished case; ``finished`` reads
them back for a resume, skipping (and reporting) lines that are not rows and
never cutting anything off the file. Each
failing case gets a folder under ``failures/`` with its graph (.sdg), its
inputs and the reference's outputs (safetensors) and the one command that
replays it.
"""

from __future__ import annotations

import json
import os
import shlex
import stat
from pathlib import Path
from typing import Any, TextIO

import attrs

from sigdnn.campaign.cases import Case
from sigdnn.campaign.judge import ReferenceResult
from sigdnn.io import FileError, read_regular_file, write_file, write_tensor_file
from sigdnn.io.files import os_error, shown

RESULTS = "results.jsonl"
SHRUNK = "shrunk.jsonl"
FAILURES = "failures"


MAX_RESULTS_BYTES = 1 << 30  # about three million rows


@attrs.frozen
class Earlier:
    """What an earlier run left in a results file: its rows by case id, and the lines that could not be read."""

    rows: dict[str, dict[str, Any]]
    unreadable: tuple[int, ...] = ()  # 1-based line numbers, skipped and left in the file


def check_results_path(path: Path) -> None:
    """FileError unless ``path`` is a file of the campaign's own folder: not a symbolic link, no second name.

    Appending through a link, or to a file hard-linked elsewhere, would change
    a file outside the campaign's folder.
    """
    if os.path.islink(path):
        raise FileError(
            f"campaign results {shown(str(path))} is a symbolic link; sigdnn writes results only into the "
            "campaign's own folder: remove the link or give another output folder"
        )
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as e:
        raise os_error("campaign results", str(path), e) from None
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise FileError(
            f"campaign results {shown(str(path))} has {st.st_nlink} names (hard links); appending would change "
            "the other files too: copy it (cp) or give another output folder"
        )


def finished(path: Path) -> Earlier:
    """Rows already written, by case id (a later row of one case wins); nothing is ever cut off the file.

    Lines that are not rows (a line torn by a kill, a damaged one in the
    middle) are skipped and reported; a torn last line gets its newline
    (the file replaced atomically) so new rows start on a line of their own.
    """
    check_results_path(path)
    if not os.path.lexists(path):
        return Earlier({})
    data = bytes(read_regular_file(path, what="campaign results", max_bytes=MAX_RESULTS_BYTES))
    rows: dict[str, dict[str, Any]] = {}
    unreadable: list[int] = []
    for number, line in enumerate(data.splitlines(), 1):
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict) and isinstance(row.get("case"), str):
            rows[row["case"]] = row
        else:
            unreadable.append(number)
    if data and not data.endswith(b"\n"):
        write_file(path, lambda f: f.write(data + b"\n"), what="campaign results")
    return Earlier(rows, tuple(unreadable))


class ResultsLog:
    """Appends rows to a JSON-lines file of the campaign's folder, one flushed line per row (never through a link)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        check_results_path(path)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(path, flags | os.O_NONBLOCK, 0o666)
        except OSError as e:
            raise os_error("campaign results", str(path), e, "cannot write") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise FileError(f"campaign results {shown(str(path))} is not a regular file; give another output folder")
        self._file: TextIO = os.fdopen(fd, "a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._file.write(json.dumps(row, allow_nan=True) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> ResultsLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reproduce_command(graph_file: Path, case: Case) -> str:
    """The ``sigdnn validate`` line that replays a case (same seed, so the same inputs)."""
    words = ["sigdnn", "validate", str(graph_file), "--backend", case.backend, "--seed", str(case.seed)]
    if case.engine is not None:
        words += ["--engine", str(case.engine)]
    return shlex.join(words)


def write_failure(folder: Path, case: Case, reference: ReferenceResult, row: dict[str, Any]) -> str:
    """Write a failing case's files under ``folder/<case id>``; returns the command that replays it."""
    where = folder / case.case_id
    where.mkdir(parents=True, exist_ok=True)
    graph_file = where / "graph.sdg"
    write_file(graph_file, lambda f: f.write(case.graph), what="failing case graph")
    write_tensor_file(where / "inputs.safetensors", reference.inputs, what="failing case inputs")
    write_tensor_file(where / "reference.safetensors", reference.outputs, what="failing case reference outputs")
    command = reproduce_command(graph_file, case)
    run = shlex.join(["sigdnn", "run", str(graph_file), "--inputs", str(where / "inputs.safetensors")])
    if case.engine is not None:
        run += f" --engine {shlex.quote(str(case.engine))}"
    text = json.dumps({**row, "reproduce": command, "run_device_only": run}, indent=2, allow_nan=True)
    write_file(where / "case.json", lambda f: f.write(text.encode()), what="failing case report")
    return command
