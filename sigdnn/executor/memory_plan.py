"""Static memory plan for virtual tensors: one arena, offsets reused by liveness.

A virtual tensor lives from the step that writes it to the last step that
reads it. Offsets are assigned first-fit as the steps are walked, so a
buffer is reused as soon as its last reader has run; the arena's size is
the plan's peak intermediate memory.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import span_elements

ALIGNMENT = 256  # bytes: what GPU vector loads and cuBLAS-style kernels like


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@attrs.frozen
class MemoryPlan:
    offsets: dict[int, int]  # virtual tensor uid -> byte offset in the arena
    sizes: dict[int, int]  # uid -> bytes its strided span needs
    peak_bytes: int  # arena size
    total_bytes: int  # what allocating every intermediate separately would take


def tensor_bytes(graph: Graph, uid: int) -> int:
    t = graph.tensors[uid]
    return span_elements(t.dims, t.strides) * graph.dtype_of(t).itemsize


def plan_memory(graph: Graph, order: Sequence[int]) -> MemoryPlan:
    """Assign arena offsets to every virtual tensor along the execution order."""
    virtual = {uid for uid, t in graph.tensors.items() if t.is_virtual}
    last_use: dict[int, int] = {}
    for step, i in enumerate(order):
        for uid in graph.nodes[i].op.ports().values():
            if uid in virtual:
                last_use[uid] = step
    offsets: dict[int, int] = {}
    sizes: dict[int, int] = {}
    live: list[tuple[int, int, int]] = []  # (offset, size, uid), sorted by offset
    expiry: dict[int, list[int]] = {}
    peak = 0
    for step, i in enumerate(order):
        for uid in graph.nodes[i].op.outputs().values():
            if uid not in virtual:
                continue
            size = _align(max(tensor_bytes(graph, uid), 1))
            offset = _first_fit(live, size)
            bisect.insort(live, (offset, size, uid))
            offsets[uid], sizes[uid] = offset, size
            peak = max(peak, offset + size)
            expiry.setdefault(last_use[uid], []).append(uid)
        for uid in expiry.pop(step, ()):
            live.remove((offsets[uid], sizes[uid], uid))
    return MemoryPlan(offsets, sizes, peak, sum(sizes.values()))


def _first_fit(live: list[tuple[int, int, int]], size: int) -> int:
    cursor = 0
    for offset, used, _ in live:
        if offset - cursor >= size:
            return cursor
        cursor = max(cursor, offset + used)
    return cursor
