"""Coverage-guided fuzzing of the reader, checks, planner and reference with atheris (libFuzzer).

    python tests/fuzz/coverage_harness.py -max_total_time=600 -timeout=2 -rss_limit_mb=512 [CORPUS_DIR]

libFuzzer keeps the inputs that reach new code and mutates them further;
``-timeout`` and ``-rss_limit_mb`` turn a slow or memory-hungry input into a
failure, as an escaped exception is. The corpus starts from the seed graphs
of test_fuzz_buffers.py (written into CORPUS_DIR, default a temporary one).
An input passes when it parses and runs, or ends in a SigdnnError other than
ExecutionError (a graph that got a plan must run).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import atheris
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_fuzz_buffers import FUZZ_LIMITS, SEEDS, random_inputs

import sigdnn
from sigdnn import ExecutionError, SigdnnError

EXECUTOR = sigdnn.Executor(limits=FUZZ_LIMITS, cache_size=8)
for _seed in SEEDS:  # load every layer sigdnn imports lazily, so that all of it gets instrumented
    EXECUTOR.execute(EXECUTOR.prepare(_seed), random_inputs(sigdnn.deserialize(_seed), np.random.default_rng(0)))


def one_input(data: bytes) -> None:
    try:
        graph = sigdnn.deserialize(data, limits=FUZZ_LIMITS)
        plan = EXECUTOR.prepare(data)
        EXECUTOR.execute(plan, random_inputs(graph, np.random.default_rng(len(data))))
    except ExecutionError:
        raise
    except SigdnnError as e:
        if not str(e):
            raise AssertionError(f"{type(e).__name__} without a message") from e


def main() -> None:
    corpus = [a for a in sys.argv[1:] if not a.startswith("-")]
    if not corpus:
        folder = tempfile.mkdtemp(prefix="sigdnn-corpus-")
        sys.argv.append(folder)
        corpus = [folder]
    for i, seed in enumerate(SEEDS):
        (Path(corpus[0]) / f"seed-{i}.sdg").write_bytes(seed)
    atheris.instrument_all()
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
