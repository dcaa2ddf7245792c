"""Cached graphs: one prepared sigdnn plan per op and signature (shapes, strides, dtypes, device, attributes).

A call looks its plan up by that signature, allocates the outputs as torch
tensors and hands the executor a pack keyed by uid; a new signature builds
its graph once. CPU tensors run on the reference, CUDA tensors on the GPU
backend.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch

from sigdnn.executor.executor import Executor
from sigdnn.executor.plan import ExecutionPlan
from sigdnn.graph.graph import Graph
from sigdnn.torch.graphs import Spec

_EXECUTORS: dict[tuple[str, bool], Executor] = {}
_lock = threading.Lock()


def executor_for(device: torch.device, fallback: bool = False) -> Executor:
    """The executor for a device type: "reference" for the CPU, "gpu" for CUDA (one each per process);
    ``fallback``: a GPU executor that runs on the reference what no GPU builder takes."""
    backend = "gpu" if device.type == "cuda" else "reference"
    key = (backend, fallback and backend == "gpu")
    found = _EXECUTORS.get(key)
    if found is None:
        with _lock:
            found = _EXECUTORS.setdefault(key, Executor(backend, fallback="reference" if key[1] else None))
    return found


class CachedGraph:
    """A prepared plan and how to call it: the inputs' uids in argument order, the outputs' uids, dims, dtypes."""

    def __init__(self, executor: Executor, plan: ExecutionPlan) -> None:
        graph = plan.graph
        self.executor = executor
        self.plan = plan
        self.inputs = tuple(t.uid for t in graph.inputs)
        self.outputs = tuple(
            (t.uid, t.dims, t.strides, torch.empty((), dtype=_torch_dtype(graph.dtype_of(t))).dtype)
            for t in graph.outputs
        )
        self.uids = self.inputs + tuple(uid for uid, *_ in self.outputs)

    def __call__(self, tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        like = tensors[0]  # (its method takes the device from it: cheaper than torch.empty_strided's device=)
        outs = tuple(like.new_empty_strided(dims, strides, dtype=dtype) for _, dims, strides, dtype in self.outputs)
        self.executor.execute_keyed(self.plan, self.uids, (*tensors, *outs))
        return outs


_CACHE: dict[Hashable, CachedGraph] = {}


def run(
    op: str, build: Callable[..., Graph], tensors: Sequence[torch.Tensor], attributes: tuple, fallback: bool = False
) -> tuple[torch.Tensor, ...]:
    """Run ``op`` on ``tensors``: its cached graph for this signature, built with ``build(*specs, *attributes)``
    (``fallback``: on CUDA, steps no GPU builder takes run on the reference). The key holds each tensor's device
    (``get_device``: -1 on the CPU) beside its shape, strides and dtype: on the GPU a cached graph's later calls
    read the tensors' addresses alone (``Executor.execute_keyed``), so everything else must be in the key."""
    key = (op, attributes, *[(t.shape, t.stride(), t.dtype, t.get_device()) for t in tensors])
    cached = _CACHE.get(key)
    if cached is None:
        executor = executor_for(tensors[0].device, fallback)
        graph = build(*(Spec.of(t) for t in tensors), *attributes)
        cached = _CACHE.setdefault(key, CachedGraph(executor, executor.prepare(graph)))
    return cached(tensors)


def cache_size() -> int:
    """How many graphs are cached (one per op and signature seen)."""
    return len(_CACHE)


def _torch_dtype(dtype: Any) -> torch.dtype:
    return getattr(torch, {"fp8_e4m3": "float8_e4m3fn", "fp8_e5m2": "float8_e5m2"}.get(dtype.value, dtype.value))
