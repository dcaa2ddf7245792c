"""The GPU reference on the CPU: Executor("gpu-reference") over host memory, its kernels emulated.

``gpu_reference_executor`` is a real Executor("gpu-reference") whose device is
the cuTile tests' emulated GPU (host buffers laid out with the graph's
strides): prepare and execute run unchanged, and every kernel of
``gpu_reference/kernels/tiles.py`` runs through the NumPy emulator.
``worst_ulps`` measures agreement with the CPU reference (``gpu_reference.agreement``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sigdnn
from sigdnn.plan_builders.gpu_reference import base
from sigdnn.plan_builders.gpu_reference.agreement import agreement_ulps, ulps  # noqa: F401 (the tests' import point)

_CUTILE_TESTS = str(Path(__file__).resolve().parent / "plan_builders" / "cutile")
if _CUTILE_TESTS not in sys.path:  # the emulated GPU memory the cuTile tests use
    sys.path.append(_CUTILE_TESTS)
from emulated import EmulatedGpuMemory  # noqa: E402


def make_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU reference's builders report themselves available (their kernels will be emulated)."""
    monkeypatch.setattr(base, "unavailable_reason", lambda: None)


def gpu_reference_executor(**kwargs: Any) -> sigdnn.Executor:
    ex = sigdnn.Executor("gpu-reference", **kwargs)
    ex._memory = EmulatedGpuMemory()
    return ex


def worst_ulps(graph: sigdnn.Graph, inputs: dict[str, np.ndarray]) -> dict[str, tuple[int, int]]:
    """Per output: (largest agreement_ulps, elements at exactly 1) between the GPU and CPU references."""
    got, want = run_both(graph, inputs)
    found = {}
    for name in want:
        u = agreement_ulps(got[name], want[name])
        found[name] = (int(u.max(initial=0)), int((u == 1).sum()))
    return found


def run_both(graph: sigdnn.Graph, inputs: dict[str, np.ndarray]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(GPU reference's outputs, CPU reference's outputs) of one graph on the same inputs."""
    gpu = gpu_reference_executor()
    cpu = sigdnn.Executor("reference")
    return (
        gpu.execute(gpu.prepare(graph), inputs),
        cpu.execute(cpu.prepare(graph), inputs),
    )
