"""Coverage-guided fuzzing of one importer with atheris (libFuzzer): hipdnn, cudnn_json or onnx.

    python tests/fuzz/importer_harness.py FORMAT -max_total_time=600 -timeout=2 -rss_limit_mb=512 [CORPUS_DIR]

The corpus starts from the seeds of tests/importers/test_fuzz_importers.py
(ONNX adds the external-data and folding seeds of test_fuzz_files.py, read
against a folder holding their external file). An input passes when it
imports, or ends in a SigdnnError with a message; any other exception, an
input over the timeout or over the RSS limit is a failure libFuzzer reports.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "importers")]

FOLDER = Path(tempfile.mkdtemp(prefix="sigdnn-onnx-ext-"))


def _formats() -> dict[str, tuple[Callable[[bytes], object], list[bytes]]]:
    from test_fuzz_files import onnx_seeds as onnx_file_seeds
    from test_fuzz_importers import hipdnn_seeds, json_seeds, onnx_seeds

    from sigdnn.importers import cudnn_json, hipdnn
    from sigdnn.importers import onnx as onnx_import

    return {
        "hipdnn": (hipdnn.load, hipdnn_seeds()),
        "cudnn_json": (cudnn_json.load, json_seeds()),
        "onnx": (
            lambda data: onnx_import.load(data, base_dir=FOLDER, max_bytes=1 << 20),
            onnx_seeds() + [data for _, data in onnx_file_seeds(FOLDER)],
        ),
    }


def main() -> None:
    fmt = sys.argv.pop(1)
    with atheris.instrument_imports(include=["sigdnn"]):  # sigdnn only: instrumenting all of NumPy and onnx
        from sigdnn import SigdnnError  # took longer than the run itself on a busy machine

        load, seeds = _formats()[fmt]

        def one_input(data: bytes) -> None:
            try:
                load(data)
            except SigdnnError as e:
                if not str(e):
                    raise AssertionError(f"{type(e).__name__} without a message") from e

        for seed in seeds:
            one_input(seed)  # the lazily imported layers load here, inside the instrumentation
    corpus = [a for a in sys.argv[1:] if not a.startswith("-")]
    if not corpus:
        corpus = [tempfile.mkdtemp(prefix=f"sigdnn-{fmt}-corpus-")]
        sys.argv.append(corpus[0])
    for i, seed in enumerate(seeds):
        (Path(corpus[0]) / f"seed-{i}").write_bytes(seed)
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
