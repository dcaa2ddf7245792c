"""The backend a command runs on: its packages checked up front, the executor made, the plan prepared."""

from __future__ import annotations

import argparse
import time
from typing import Any

import sigdnn
from sigdnn.cli.files import read_graph
from sigdnn.cli.options import limits
from sigdnn.errors import UsageError

GPU_MODULES = {"cuda.core": "cuda-python", "cuda.tile": "cuda-tile", "cutlass": "nvidia-cutlass-dsl"}


def check_backend(backend: str, default_gpu: bool = False) -> None:
    """--backend gpu needs cuda.core, a GPU DSL and a GPU: say what to do before anything else fails.

    ``default_gpu``: the command runs on the GPU unless told otherwise (validate), so the message says so.
    """
    if backend != "gpu":
        return
    import importlib.util

    def present(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False

    lead = (
        "sigdnn validate checks the GPU builders against the reference unless told otherwise; " if default_gpu else ""
    )
    instead = "validate the graph on the CPU reference alone" if default_gpu else "run on the CPU"
    missing = [package for module, package in GPU_MODULES.items() if not present(module)]
    if "cuda-python" in missing or {"cuda-tile", "nvidia-cutlass-dsl"} <= set(missing):  # memory, or no DSL
        raise UsageError(
            f"{lead}--backend gpu needs the GPU packages ({', '.join(missing)} not installed): on a machine with an "
            f"NVIDIA GPU install them with pip install 'sigdnn[gpu]', or {instead} with --backend reference"
        )
    from sigdnn.runtime.cuda import gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is not None:
        raise UsageError(f"{lead}--backend gpu cannot run here: {reason}; {instead} with --backend reference")


def prepare(args: argparse.Namespace, update: Any, engine: Any = None) -> tuple[sigdnn.Executor, Any, float]:
    """(executor, plan, seconds prepare took) for ``args.graph``."""
    check_backend(args.backend)
    update(f"reading {args.graph}")
    data = read_graph(args, args.graph)
    update(f"preparing {args.graph}")
    start = time.perf_counter()
    executor = sigdnn.Executor(args.backend, engine=engine, limits=limits(args))
    plan = executor.prepare(data)
    return executor, plan, time.perf_counter() - start
