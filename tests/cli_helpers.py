"""Shared by the CLI tests: small graphs, running the CLI in-process, and the one-line error rule."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import sigdnn
from sigdnn.cli import main


def add_graph(path: Path, name: str = "small", output: str = "c") -> Path:
    """c = a + b in float32, a (2, 3), b (1, 3)."""
    g = sigdnn.Graph(name, io_dtype="float32")
    a, b = g.tensor("a", dims=(2, 3)), g.tensor("b", dims=(1, 3))
    g.pointwise("add", a, b, name="add").set_output(True).set_name(output)
    path.write_bytes(g.serialize())
    return path


def typed_graph(path: Path, dtype: str, inputs: tuple[str, str] = ("x", "w"), output: str = "y") -> Path:
    """output = inputs[0] * inputs[1] in ``dtype`` (float32 compute): outputs that need every bit of the dtype."""
    g = sigdnn.Graph(f"mul_{dtype}", io_dtype=dtype, compute_dtype="float32")
    x, w = g.tensor(inputs[0], dims=(4, 8)), g.tensor(inputs[1], dims=(1, 8))
    g.pointwise("mul", x, w, name="mul").set_output(True).set_name(output)
    path.write_bytes(g.serialize())
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: object) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``sigdnn ARGS`` run in this process."""
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    return code, out, err


def cli_process(*args: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``python -m sigdnn ARGS`` in a fresh process."""
    return subprocess.run(
        [sys.executable, "-m", "sigdnn", *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def assert_one_line_error(code: int, err: str, *needles: str) -> None:
    """Exit 2 and exactly one line on stderr, a user-facing error (not an internal one), naming ``needles``."""
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(("sigdnn: error: ", "sigdnn run: error: ", "sigdnn validate: error: ")), err
    assert "Traceback" not in err and "internal error" not in err, err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
