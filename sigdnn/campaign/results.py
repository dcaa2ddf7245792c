"""Where a campaign's results go: JSON lines written as cases finish, and replayable failing cases.

``results.jsonl`` gets one row per case the moment it finishes (flushed), so
a campaign killed at any point keeps every finished case; ``finished`` reads
them back for a resume, dropping a last line the kill cut short. Each
failing case gets a folder under ``failures/`` with its graph (.sdg), its
inputs and the reference's outputs (safetensors) and the one command that
replays it.
"""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Any, TextIO

from sigdnn.campaign.cases import Case
from sigdnn.campaign.judge import ReferenceResult
from sigdnn.io import write_file, write_tensor_file

RESULTS = "results.jsonl"
SHRUNK = "shrunk.jsonl"
FAILURES = "failures"


def finished(path: Path) -> dict[str, dict[str, Any]]:
    """Rows already written, by case id; a torn last line (the writer was killed) is cut off the file."""
    if not path.exists():
        return {}
    rows: dict[str, dict[str, Any]] = {}
    good = 0
    with open(path, "rb") as f:
        for line in f:
            try:
                row = json.loads(line)
            except ValueError:
                break
            if not line.endswith(b"\n") or not isinstance(row, dict) or "case" not in row:
                break
            rows[row["case"]] = row
            good += len(line)
    if good != path.stat().st_size:
        os.truncate(path, good)
    return rows


class ResultsLog:
    """Appends rows to a JSON-lines file, one flushed line per row."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file: TextIO = open(path, "a", encoding="utf-8")  # noqa: SIM115 (closed by close())

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
