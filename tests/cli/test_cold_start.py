"""What a cold `sigdnn run` of a small float32 graph imports (#32: the 0.4 s start-up): not ml_dtypes (0.3-1.5 s),
not the GPU builders' modules, not rich's progress display when stderr is no terminal, not the tuner's statistics,
not validation's comparison, not the schema modules of ops the graph does not hold. Measured figures:
benchmarks/results/import_time.md."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

import sigdnn
from sigdnn.io import read_tensor_file

PROBE = """
import json, sys
from sigdnn.cli import main
code = main(sys.argv[1:])
heavy = ("ml_dtypes", "rich.progress", "sigdnn.plan_builders.cutile", "sigdnn.plan_builders.cute", "torch",
         "statistics", "sigdnn.validation.checks", "sigdnn.accuracy.compare", "sigdnn.schemas.ConvFpropAttributes")
print(json.dumps({"code": code, "loaded": sorted(m for m in heavy if m in sys.modules)}), file=sys.stderr)
"""


def probe(*args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120, check=False
    )
    return json.loads(done.stderr.strip().splitlines()[-1])


def tiny(path: Path, dtype: str) -> Path:
    g = sigdnn.Graph("tiny", io_dtype=dtype, compute_dtype="float32")
    x, w, b = g.tensor("x", (4, 8)), g.tensor("w", (8, 8)), g.tensor("b", (1, 8))
    g.pointwise("relu_fwd", g.pointwise("add", g.matmul(x, w), b)).set_output(True).set_name("y")
    path.write_bytes(g.serialize())
    return path


def test_a_float32_run_imports_neither_ml_dtypes_nor_gpu_builders_nor_progress(tmp_path: Path) -> None:
    assert probe("run", str(tiny(tmp_path / "g.sdg", "float32"))) == {"code": 0, "loaded": []}


def test_a_bfloat16_run_loads_ml_dtypes_when_it_needs_it(tmp_path: Path) -> None:
    out = tmp_path / "y.npz"
    assert probe("run", str(tiny(tmp_path / "g.sdg", "bfloat16")), "--out", str(out))["loaded"] == ["ml_dtypes"]
    assert read_tensor_file(out)["y"].dtype.name == "bfloat16"


def test_an_ml_dtypes_type_is_known_before_sigdnn_met_one() -> None:
    code = (
        "import ml_dtypes, numpy as np; from sigdnn.dtypes import as_data_type; "
        "print([str(as_data_type(np.dtype(t))) for t in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, "
        "ml_dtypes.float8_e5m2)])"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "['bfloat16', 'fp8_e4m3', 'fp8_e5m2']"
    assert np.dtype(sigdnn.DataType.BFLOAT16.numpy).name == "bfloat16"
