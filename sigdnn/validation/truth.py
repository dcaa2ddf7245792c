"""Validation's truth side: the CPU reference, or the GPU reference when a GPU is present.

Both are sigdnn's own reference builders only (never a plugin registered
beside them, which must not be validated against itself), planned node by
node. ``truth_executor`` makes the one a validation names: "cpu", "gpu", or
None for the default (the GPU reference where it can run, else the CPU
one). A prepared Executor of the "reference" or "gpu-reference" backend may
be given instead (the CPU tests hand an emulated GPU reference this way).
"""

from __future__ import annotations

from sigdnn.errors import UsageError
from sigdnn.executor import Executor
from sigdnn.registry.registry import REFERENCE_ONLY, Registry
from sigdnn.runtime.device import ExecutionContext

TRUTHS = ("gpu", "cpu")
GPU_REFERENCE_ONLY = Registry(packages=("sigdnn.plan_builders.gpu_reference",), entry_point_group=None)
BACKEND_TRUTH = {"reference": "cpu", "gpu-reference": "gpu"}
TRUTH_BACKEND = {truth: backend for backend, truth in BACKEND_TRUTH.items()}


def default_truth() -> str:
    """ "gpu" when the GPU reference can run here (a GPU and cuTile), else "cpu"."""
    from sigdnn.plan_builders.gpu_reference.base import unavailable_reason

    return "gpu" if unavailable_reason() is None else "cpu"


def truth_executor(truth: str | Executor | None, **kwargs: object) -> Executor:
    """The executor that computes the truth: the CPU or GPU reference alone, fusion off."""
    if truth is not None and not isinstance(truth, str):  # a prepared executor
        if truth.backend not in BACKEND_TRUTH:
            raise UsageError(f"a truth executor runs a reference backend, not {truth.backend!r}")
        return truth
    name = default_truth() if truth is None else truth
    if name == "cpu":
        return Executor("reference", fusion=False, registry=REFERENCE_ONLY, **kwargs)  # type: ignore[arg-type]
    if name == "gpu":
        return Executor("gpu-reference", fusion=False, registry=GPU_REFERENCE_ONLY, **kwargs)  # type: ignore[arg-type]
    raise UsageError(f"truth={truth!r}: expected one of {', '.join(TRUTHS)} (or None for the default)")


def truth_name(executor: Executor) -> str:
    return BACKEND_TRUTH[executor.backend]


def run_context(executor: Executor) -> ExecutionContext:
    """What a truth plan run by hand gets: the CPU, or the GPU reference's device and stream."""
    if executor.backend == "reference":
        return ExecutionContext()
    memory = executor.memory
    return ExecutionContext(memory.device, getattr(memory.context, "stream_handle", None))
