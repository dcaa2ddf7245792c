"""Hostile paths and files through the CLI (issue 11): exit 2 and ONE line on stderr, never a traceback.

Each case of the issue is a named test; then seeded mutation fuzzing of
tensor files and graph files. Most run in this process (``main``); a
representative few through ``python -m sigdnn`` with a timeout, so a hang
(a FIFO) or a crash cannot hide behind in-process handling.
"""

from __future__ import annotations

import errno
import io
import json
import os
import random
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from cli_helpers import add_graph, assert_one_line_error, cli, cli_process, typed_graph

import sigdnn
from sigdnn.io import write_tensor_file

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def graph(tmp_path: Path) -> Path:
    return add_graph(tmp_path / "g.sdg")


def fail_open(monkeypatch: pytest.MonkeyPatch, path: Path, code: int) -> None:
    """os.open fails on ``path`` (as root, chmod cannot make a file unreadable or a directory read-only)."""
    real = os.open

    def fake(p: object, *args: object, **kw: object) -> int:
        if os.fspath(p) == str(path):  # type: ignore[arg-type]
            raise OSError(code, os.strerror(code), str(path))
        return real(p, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", fake)


def npy_claiming(path: Path, shape: tuple[int, ...]) -> Path:
    with path.open("wb") as f:
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": shape})
        f.write(b"\0" * 64)
    return path


def truncated_npz(path: Path) -> Path:
    buffer = io.BytesIO()
    np.savez(buffer, a=np.zeros((2, 3), np.float32), b=np.zeros((1, 3), np.float32))
    path.write_bytes(buffer.getvalue()[:-40])
    return path


def pickled_npz(path: Path) -> Path:
    np.savez(path, a=np.array([{"evil": 1}], dtype=object), b=np.zeros((1, 3), np.float32))
    return path


def sparse(path: Path, size: int) -> Path:
    with path.open("wb") as f:
        f.truncate(size)
    return path


def symlink_loop(directory: Path) -> Path:
    (directory / "loop_a").symlink_to(directory / "loop_b")
    (directory / "loop_b").symlink_to(directory / "loop_a")
    return directory / "loop_a"


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


# Issue 11's list: (arguments given tmp_path and a valid graph, words the one line must hold)
CASES: dict[str, tuple[Callable[[Path, Path], list[object]], tuple[str, ...]]] = {
    "graph is a directory": (lambda d, g: ["run", d], ("is a directory",)),
    "graph is a symlink loop": (lambda d, g: ["inspect", symlink_loop(d)], ("loop of symbolic links",)),
    "graph is a FIFO": (lambda d, g: ["run", fifo(d / "f")], ("is a FIFO",)),
    "graph is /dev/zero": (lambda d, g: ["inspect", "/dev/zero"], ("'/dev/zero' is a character device",)),
    "graph is a 3 GiB sparse file": (
        lambda d, g: ["run", sparse(d / "s.sdg", 3 << 30)],
        ("is 3 GiB, over the 256 MiB",),
    ),
    "graph path has a NUL": (lambda d, g: ["run", "g\0.sdg"], ("contains a NUL byte",)),
    "validate a directory": (lambda d, g: ["validate", d, "--backend", "reference"], ("is a directory",)),
    "validate a symlink loop": (lambda d, g: ["validate", symlink_loop(d), "--backend", "reference"], ("loop",)),
    "validate a FIFO": (lambda d, g: ["validate", fifo(d / "f"), "--backend", "reference"], ("is a FIFO",)),
    "inputs is a directory": (lambda d, g: ["run", g, "--inputs", d], ("tensor file", "is a directory")),
    "inputs is not a zip": (lambda d, g: ["run", g, "--inputs", _write(d / "x.npz", b"PK\x03\x04junk")], ("zip",)),
    "inputs is text": (
        lambda d, g: ["run", g, "--inputs", _write(d / "x.txt", b"a,b\n1,2\n")],
        ("is not a safetensors",),
    ),
    "inputs is a PNG": (
        lambda d, g: ["run", g, "--inputs", _write(d / "x.png", b"\x89PNG\r\n\x1a\n" + bytes(64))],
        ("is not a safetensors",),
    ),
    "inputs is pickled": (lambda d, g: ["run", g, "--inputs", pickled_npz(d / "p.npz")], ("pickled",)),
    "inputs is truncated": (lambda d, g: ["run", g, "--inputs", truncated_npz(d / "t.npz")], ("truncated",)),
    "inputs npy claims 2^40 elements": (
        lambda d, g: ["run", g, "--inputs", npy_claiming(d / "a.npy", (1 << 40,))],
        ("declares 4 TiB",),
    ),
    "inputs is /dev/zero": (lambda d, g: ["run", g, "--inputs", "/dev/zero"], ("character device",)),
    "inputs is a FIFO": (lambda d, g: ["run", g, "--inputs", fifo(d / "f")], ("is a FIFO",)),
    "out is a directory": (lambda d, g: ["run", g, "--out", d], ("--out file", "is a directory")),
    "out is in a missing directory": (lambda d, g: ["run", g, "--out", d / "no" / "o.npz"], ("does not exist",)),
    "out is /dev/full": (lambda d, g: ["run", g, "--out", "/dev/full"], ("character device",)),
    "save-inputs is a directory": (lambda d, g: ["run", g, "--save-inputs", d], ("--save-inputs file",)),
    "validate report is a directory": (
        lambda d, g: ["validate", g, "--backend", "reference", "--report", d],
        ("--report file", "is a directory"),
    ),
    "seed -1": (lambda d, g: ["run", g, "--seed", "-1"], ("argument --seed: -1 is negative",)),
    "seeds 0": (lambda d, g: ["validate", g, "--seeds", "0"], ("argument --seeds",)),
    "max-bytes nonsense": (lambda d, g: ["run", g, "--max-bytes", "lots"], ("argument --max-bytes", "is not a size")),
    "engine unknown": (lambda d, g: ["run", g, "--engine", "nope"], ("NoPlanError", "nope")),
    "input of the wrong shape": (
        lambda d, g: ["run", g, "--inputs", _tensors(d / "w.safetensors", a=np.zeros((3, 2), np.float32))],
        ("VariantPackError", "'a'", "sigdnn inspect GRAPH"),
    ),
}


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _tensors(path: Path, **arrays: np.ndarray) -> Path:
    write_tensor_file(path, {"b": np.zeros((1, 3), np.float32), **arrays})
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_case_is_one_clean_line(
    case: str, tmp_path: Path, graph: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, needles = CASES[case]
    code, _, err = cli(capsys, *make(tmp_path, graph))
    assert_one_line_error(code, err, *needles)


def test_unreadable_graph_file(
    tmp_path: Path, graph: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fail_open(monkeypatch, graph, errno.EACCES)
    for command in ("run", "inspect", "validate"):
        code, _, err = cli(capsys, command, graph, "--backend", "reference")
        assert_one_line_error(code, err, "Permission denied", "make it readable")


def test_out_in_a_read_only_place(
    tmp_path: Path, graph: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    real = os.open

    def read_only(p: object, flags: int, *args: object, **kw: object) -> int:  # every file created there fails
        if flags & os.O_CREAT and os.path.dirname(os.fspath(p)) == str(tmp_path):  # type: ignore[arg-type]
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(p))  # type: ignore[arg-type]
        return real(p, flags, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", read_only)
    code, _, err = cli(capsys, "run", graph, "--out", tmp_path / "o.safetensors")
    assert_one_line_error(code, err, "Read-only file system", "choose a writable place")


def test_out_of_memory_is_one_line(
    tmp_path: Path, graph: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def exhausted(*args: object, **kw: object) -> None:
        raise MemoryError

    monkeypatch.setattr(sigdnn.Executor, "execute", exhausted)
    code, _, err = cli(capsys, "run", graph)
    assert_one_line_error(code, err, "out of memory", "--max-bytes")


def test_an_internal_error_is_one_line_unless_asked(
    graph: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object, **kw: object) -> None:
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(sigdnn.Executor, "execute", broken)
    code, _, err = cli(capsys, "run", graph)
    assert code == 2 and err.count("\n") == 1 and "internal error: ZeroDivisionError: a bug" in err
    monkeypatch.setenv("SIGDNN_TRACEBACK", "1")
    with pytest.raises(ZeroDivisionError):
        cli(capsys, "run", graph)


@pytest.mark.parametrize(
    "case", ["graph is a FIFO", "inputs is pickled", "inputs npy claims 2^40 elements", "out is a directory", "seed -1"]
)
def test_hostile_case_through_a_real_process(case: str, tmp_path: Path, graph: Path) -> None:
    make, needles = CASES[case]
    done = cli_process(*make(tmp_path, graph), timeout=30)
    assert_one_line_error(done.returncode, done.stderr, *needles)


# -- seeded mutation fuzzing ------------------------------------------------------------------------
def _mutate(rng: random.Random, data: bytes) -> bytes:
    """One of: flip bytes, truncate, splice in extreme integers, duplicate a slice."""
    out = bytearray(data)
    kind = rng.randrange(4)
    if kind == 0:
        for _ in range(rng.randint(1, 8)):
            out[rng.randrange(len(out))] = rng.randrange(256)
    elif kind == 1:
        del out[rng.randrange(len(out)) :]
    elif kind == 2:
        at = rng.randrange(max(1, len(out) - 8))
        out[at : at + 8] = struct.pack("<Q", rng.choice([0, 1, 2**31, 2**32 - 1, 2**40, 2**63 - 1, 2**64 - 1]))
    else:
        at, n = rng.randrange(len(out)), rng.randint(1, 64)
        out[at:at] = out[at : at + n] * rng.randint(1, 50)
    return bytes(out)


def _tensor_file_seeds(tmp_path: Path) -> list[bytes]:
    graph = sigdnn.deserialize(typed_graph(tmp_path / "seed.sdg", "bfloat16").read_bytes())
    inputs = {t.name: np.zeros(t.dims, graph.dtype_of(t).numpy) for t in graph.inputs}
    seeds = []
    for suffix in (".safetensors", ".npz"):
        write_tensor_file(tmp_path / f"seed{suffix}", inputs)
        seeds.append((tmp_path / f"seed{suffix}").read_bytes())
    buffer = io.BytesIO()
    np.save(buffer, inputs["x"])
    seeds.append(buffer.getvalue())
    header = json.dumps({"x": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]}}).encode()
    seeds.append(struct.pack("<Q", len(header)) + header + bytes(64))
    with zipfile.ZipFile(buffer := io.BytesIO(), "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("x.npy", seeds[2])
    seeds.append(buffer.getvalue())
    return seeds


def test_fuzz_tensor_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = typed_graph(tmp_path / "g.sdg", "bfloat16")
    rng = random.Random(20261201)
    seeds = _tensor_file_seeds(tmp_path)
    outcomes = {0: 0, 2: 0}
    for case in range(240):
        path = tmp_path / f"case{case}.bin"
        path.write_bytes(_mutate(rng, rng.choice(seeds)))
        code, _, err = cli(capsys, "run", graph, "--inputs", path, "--random-missing")
        assert code in outcomes, (case, err)
        if code:
            assert_one_line_error(code, err)
        outcomes[code] += 1
    assert outcomes[2] > 100 and outcomes[0] > 10, outcomes  # both paths exercised


def test_fuzz_graph_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    seeds = [(EXAMPLES / name).read_bytes() for name in ("conv_bias_relu.sdg", "mlp_block.sdg", "pointwise_heavy.sdg")]
    rng = random.Random(7)
    outcomes = {0: 0, 2: 0}
    for case in range(120):
        path = tmp_path / f"case{case}.sdg"
        path.write_bytes(_mutate(rng, rng.choice(seeds)))
        code, _, err = cli(capsys, "inspect", path, "--max-bytes", "64MiB")
        assert code in outcomes, (case, err)
        if code:
            assert_one_line_error(code, err, str(path))
        outcomes[code] += 1
    assert outcomes[2] > 60, outcomes


def test_fuzz_through_a_real_process(tmp_path: Path) -> None:
    """A few mutated files in one process each: the real entry point, with its own interpreter state."""
    rng = random.Random(99)
    graph = typed_graph(tmp_path / "g.sdg", "bfloat16")
    seeds = _tensor_file_seeds(tmp_path)
    for case in range(3):
        path = tmp_path / f"case{case}.bin"
        path.write_bytes(_mutate(rng, seeds[case % len(seeds)]))
        done = cli_process("run", graph, "--inputs", path, "--random-missing", timeout=30)
        assert done.returncode in (0, 2), done.stderr
        if done.returncode:
            assert_one_line_error(done.returncode, done.stderr)


def test_messages_are_one_printable_line_whatever_they_quote(
    graph: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message quoting hostile text cannot span lines, move the cursor or recolour the terminal."""

    def quoting(*args: object, **kw: object) -> None:
        raise sigdnn.ExecutionError("node 'evil\x1b[2J' failed:\nline two\r\nline three")

    monkeypatch.setattr(sigdnn.Executor, "execute", quoting)
    code, _, err = cli(capsys, "run", graph)
    assert_one_line_error(code, err, "ExecutionError", "evil\\x1b[2J", "line two line three")
    assert "\x1b" not in err and "\r" not in err
