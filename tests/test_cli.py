"""The sigdnn command: run, inspect, builders, and errors as messages (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import sigdnn
from sigdnn.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def small_graph(path: Path) -> Path:
    g = sigdnn.Graph("small", io_dtype="float32")
    g.pointwise("add", g.tensor("a", dims=(2, 3)), g.tensor("b", dims=(1, 3)), name="add").set_output(True).set_name(
        "c"
    )
    path.write_bytes(g.serialize())
    return path


def test_run_with_inputs_writes_outputs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = small_graph(tmp_path / "g.sdg")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones((1, 3), np.float32)
    np.savez(tmp_path / "in.npz", a=a, b=b)
    assert main(["run", str(graph), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as out:
        np.testing.assert_array_equal(out["c"], a + b)
    assert "c: float32 [2, 3] min 1 max 6" in capsys.readouterr().out


def test_run_random_inputs_is_reproducible(tmp_path: Path) -> None:
    graph = small_graph(tmp_path / "g.sdg")
    main(["run", str(graph), "--seed", "7", "--out", str(tmp_path / "1.npz")])
    main(["run", str(graph), "--seed", "7", "--out", str(tmp_path / "2.npz")])
    with np.load(tmp_path / "1.npz") as one, np.load(tmp_path / "2.npz") as two:
        np.testing.assert_array_equal(one["c"], two["c"])
        assert np.count_nonzero(one["c"])


def test_inspect_shows_order_keys_builders_memory(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(EXAMPLES / "conv_bias_relu.sdg")]) == 0
    out = capsys.readouterr().out
    assert "ConvFprop2d(f16,f16->f32; f32)" in out
    assert "reference.conv_fprop (#1002)" in out
    assert "peak intermediate memory" in out
    assert out.index("conv ") < out.index("bias ") < out.index("relu ")


def test_builders_lists_every_builder(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["builders"]) == 0
    out = capsys.readouterr().out
    assert "reference.pointwise" in out and "cutile.pointwise" in out
    assert "2001" in out


def test_bad_buffer_is_a_message_not_a_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.sdg"
    bad.write_bytes(b"\x00" * 64)
    assert main(["run", str(bad)]) == 2
    assert "SchemaError: not a sigdnn graph" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "missing.sdg")]) == 2


def test_python_dash_m_entry_point() -> None:
    done = subprocess.run([sys.executable, "-m", "sigdnn", "builders"], capture_output=True, text=True, check=True)
    assert "reference.matmul" in done.stdout
