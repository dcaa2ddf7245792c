"""The importers sit above the graph layer and load lazily: reading a graph file imports no importer (and no
onnx) until a foreign format is met, and no importer imports the executor."""

from __future__ import annotations

import json
import subprocess
import sys


def modules_after(code: str) -> list[str]:
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith(('sigdnn', 'onnx')))))"
    return json.loads(subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout)


def test_sigdnn_io_imports_no_importer() -> None:
    assert not [m for m in modules_after("import sigdnn.io") if m.startswith(("sigdnn.importers", "onnx"))]


def test_importers_import_neither_the_executor_nor_onnx_until_used() -> None:
    found = modules_after("import sigdnn.importers.hipdnn, sigdnn.importers.cudnn_json, sigdnn.importers.onnx")
    assert not [m for m in found if m.startswith(("sigdnn.executor", "sigdnn.registry", "sigdnn.plan_builders"))]
    assert not [m for m in found if m == "onnx" or m.startswith("onnx.")]
