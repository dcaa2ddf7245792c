"""`sigdnn campaign`: without Ray it says how to install it; bad specs and options are one-line errors."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sigdnn.cli import main

BLOCK_RAY = """
import sys
class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ModuleNotFoundError(f"No module named {name!r}")
sys.meta_path.insert(0, NoRay())
from sigdnn.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_ray_the_command_says_how_to_install_it(tmp_path: Path) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text('[[generate]]\nop = "pointwise"\nshapes = [[4]]\n')
    done = subprocess.run([sys.executable, "-c", BLOCK_RAY, "campaign", str(spec)], capture_output=True, text=True)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        "sigdnn: error: UsageError: sigdnn campaign runs on Ray, which is not installed; "
        "install it with: pip install 'sigdnn[campaign]', or pass --in-process to run the cases in this process, "
        "one at a time"
    )


def test_a_bad_spec_is_one_line_naming_the_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("ray")
    spec = tmp_path / "s.toml"
    spec.write_text('seeds = 0\n[[generate]]\nop = "pointwise"\nshapes = [[4]]\n')
    assert main(["campaign", str(spec)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"sigdnn: error: SpecError: {spec}: seeds: give a count >= 1") and err.count("\n") == 1
    assert main(["campaign", str(tmp_path / "missing.toml")]) == 2
    assert "FileError" in capsys.readouterr().err


def test_gpus_is_for_a_local_cluster_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("a cluster is already running in this process")
    spec = tmp_path / "s.toml"
    spec.write_text('[[generate]]\nop = "pointwise"\nmodes = ["add"]\nshapes = [[4]]\n')
    assert main(["campaign", str(spec), "--ray", "10.0.0.1:6379", "--gpus", "2"]) == 2
    assert "--gpus sets a local cluster's GPUs" in capsys.readouterr().err
    assert main(["campaign", str(spec), "--gpus", "0"]) == 2
    assert "give at least 1" in capsys.readouterr().err
