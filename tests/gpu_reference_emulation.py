"""The GPU reference on the CPU: Executor("gpu-reference") over host memory, its kernels emulated.

``gpu_reference_executor`` is a real Executor("gpu-reference") whose device is
the cuTile tests' emulated GPU (host buffers laid out with the graph's
strides): prepare and execute run unchanged, and every kernel of
``gpu_reference/kernels/tiles.py`` runs through the NumPy emulator.
``ulps`` measures agreement with the CPU reference in units of the output dtype.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import sigdnn
from sigdnn.plan_builders.gpu_reference import base

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


def _ordered(bits: np.ndarray, width: int) -> np.ndarray:
    """Float bit patterns mapped to integers in the order of the values they encode (-0 and +0 equal)."""
    signed = bits.astype(np.int64)
    sign = np.int64(1) << (width - 1)
    magnitude = signed & (sign - 1)
    return np.where(signed & sign, -magnitude, magnitude)


def ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """Per element: how many representable values of the dtype lie between got and want (0: the same
    value; NaN against NaN is 0, NaN against a number is the dtype's whole range). Integers and bool:
    the difference."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, want.dtype, got.shape, want.shape)
    if got.dtype.kind in "biu":
        return np.abs(got.astype(np.int64) - want.astype(np.int64))
    width = got.dtype.itemsize * 8
    word = np.dtype(f"u{got.dtype.itemsize}")
    a, b = _ordered(got.view(word), width), _ordered(want.view(word), width)
    nan_a, nan_b = np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64))
    far = np.int64(1) << min(width, 62)
    return np.where(nan_a & nan_b, 0, np.where(nan_a | nan_b, far, np.abs(a - b)))


def agreement_ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    """ulps() of the output dtype; float64 outputs are compared after both round to float32 (two float64
    computations in different summation orders differ in their last bits: docs/gpu_reference.md)."""
    if np.asarray(want).dtype == np.float64:
        with np.errstate(all="ignore"):
            return ulps(np.asarray(got).astype(np.float32), np.asarray(want).astype(np.float32))
    return ulps(got, want)


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
