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


def test_io_knows_no_foreign_format_until_the_importers_register_theirs() -> None:
    code = (
        "import sigdnn.io; before = [f.name for f in sigdnn.io.GRAPH_FORMATS]\n"
        "import sigdnn.importers; after = [f.name for f in sigdnn.io.GRAPH_FORMATS]\n"
        "import importlib; importlib.reload(sigdnn.importers)\n"
        "print(json.dumps([before, after, [f.name for f in sigdnn.io.GRAPH_FORMATS]]))"
    )
    script = f"import json\n{code}"
    out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True).stdout
    before, after, again = json.loads(out)
    assert before == [] and after == again == ["onnx", "cudnn_json", "hipdnn"]  # registered once, in this order


def test_sigdnn_load_and_prepare_of_a_path_read_foreign_files_in_a_fresh_process(tmp_path) -> None:
    """The entry points that read files register the importers themselves: nothing else need import them."""
    from test_cli_import import files

    f = files(tmp_path)
    for kind in ("json", "hipdnn"):
        path = str(f[kind])
        for code in (
            f"import sigdnn; print(sigdnn.load({path!r}).nodes[0].name)",
            f"import sigdnn; print(sigdnn.Executor('reference').prepare({path!r}).steps[0].name)",
        ):
            done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
            assert done.stdout.split() == ["conv"], done.stderr
