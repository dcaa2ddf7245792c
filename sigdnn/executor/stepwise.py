"""The generic run of a plan: every step through a memory session, one after the other.

What the CPU backends always take, and the GPU backend when a run captures
its tensors (validation) or times its steps (profiles); otherwise the GPU
runs its bound plan (``gpu_memory``), whose memory and launches are bound
once per plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from sigdnn.errors import ExecutionError, SigdnnError
from sigdnn.executor.plan import ExecutionPlan, Step
from sigdnn.executor.variant_pack import resolve_pack
from sigdnn.runtime.device import Device, ExecutionContext


def run_steps(
    plan: ExecutionPlan,
    memory: Any,
    device: Device,
    variant_pack: Mapping[Any, Any],
    to_host: bool,
    capture: dict[str, Any] | None,
    on_step: Callable[[int, Step, float], None] | None,
) -> dict[str, Any]:
    """Run ``plan`` in the memory session ``memory``; its outputs by name (``Executor.execute`` says the rest)."""
    graph, tensors = plan.graph, plan.tensors
    pack = resolve_pack(graph, variant_pack, tensors.inputs, tensors.outputs, tensors.names)
    buffers: dict[int, Any] = {}
    for uid, obj in pack.items():
        t, dtype = graph.tensors[uid], tensors.dtypes[uid]
        if t.value is not None:
            buffers[uid] = memory.scalar(obj, t, dtype)
        else:
            buffers[uid] = memory.accept(obj, t, dtype, writable=uid in tensors.writable)
    for uid, t, dtype in tensors.others:
        if uid not in buffers:
            if t.value is not None:
                buffers[uid] = memory.scalar(t.scalar(), t, dtype)
            elif t.data is not None:
                buffers[uid] = memory.accept(t.constant(), t, dtype, writable=False)
            else:
                buffers[uid] = memory.new_output(t, dtype)
    lenders = memory.lenders(plan, buffers) if plan.memory.hosted else {}
    scratch = _scratch(plan, memory)
    buffers.update(scratch[0])
    for uid, (root, offset) in plan.memory.input_views.items():
        t = graph.tensors[uid]
        buffers[uid] = memory.alias(buffers[root], offset, t, graph.dtype_of(t))
    for uid, (host, offset) in plan.memory.hosted.items():
        t = graph.tensors[uid]
        buffers[uid] = memory.alias(lenders[host], offset, t, graph.dtype_of(t))
    context = ExecutionContext(device, memory.stream, scratch[1])
    for index, step in enumerate(plan.steps):
        started = time.perf_counter() if on_step is not None else 0.0
        try:
            step.plan.execute({k: buffers[uid] for k, uid in step.bindings.items()}, context)
        except SigdnnError:
            raise
        except Exception as e:
            raise ExecutionError(f"step '{step.name}' ({step.builder.name}) failed: {type(e).__name__}: {e}") from e
        if on_step is not None:
            memory.synchronize()
            on_step(index, step, time.perf_counter() - started)
        if capture is not None:
            for uid in step.writes:
                capture[graph.tensors[uid].name] = memory.snapshot(buffers[uid], to_host)
    result = {name: memory.deliver(buffers[u], to_host) for name, u in zip(tensors.output_names, tensors.outputs)}
    memory.synchronize()
    if getattr(memory, "keeps_scratch", False) and not plan.spare_scratch:
        plan.spare_scratch.append(scratch)
    return result


def _scratch(plan: ExecutionPlan, memory: Any) -> tuple[dict[int, Any], Any]:
    """A run's arena views (uid -> view) and workspace: the plan's kept set when no other run holds it."""
    try:
        return plan.spare_scratch.pop()
    except IndexError:  # none kept yet, or another thread runs the plan now
        arena = memory.arena(plan.memory.peak_bytes)
        views = {uid: memory.view(arena, offset, t, dtype) for uid, offset, t, dtype in plan.arena_tensors}
        return views, memory.workspace(plan.workspace_bytes)
