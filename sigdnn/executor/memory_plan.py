"""Static memory plan for virtual tensors: one arena, offsets reused by liveness.

A virtual tensor lives from the step that writes it to the last step that
reads it (a step is a node or a region; tensors inside a region are never
allocated). Offsets are assigned best-fit as the steps are walked, so a
buffer is reused as soon as its last reader has run; the arena's size is
the plan's peak intermediate memory.

A view (``sigdnn.executor.views``) owns no memory: it is its root's (the
tensor it aliases, through any chain of views) at a byte offset, and the
root stays allocated from the first step that writes any tensor of its group
to the last step that reads one. A view whose root is a caller's input has
no offset here: each run makes it from the caller's buffer (``input_views``).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import span_elements

ALIGNMENT = 256  # bytes: what GPU vector loads and cuBLAS-style kernels like


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


@attrs.frozen
class MemoryPlan:
    offsets: dict[int, int]  # virtual tensor uid -> byte offset in the arena (a view's: inside its root's bytes)
    sizes: dict[int, int]  # uid of a tensor that owns memory -> bytes its strided span needs
    peak_bytes: int  # arena size
    total_bytes: int  # what allocating every intermediate that owns memory separately would take
    roots: dict[int, int] = attrs.field(factory=dict)  # view uid -> uid of the tensor whose memory it is
    # view uid -> (caller's input uid, byte offset in it): views a run makes from the caller's buffer
    input_views: dict[int, tuple[int, int]] = attrs.field(factory=dict)


def tensor_bytes(graph: Graph, uid: int) -> int:
    t = graph.tensors[uid]
    return span_elements(t.dims, t.strides) * graph.dtype_of(t).itemsize


class _FreeList:
    """Free byte ranges of the arena: best fit with splitting and coalescing.

    Every operation is a dict lookup plus a bisect, so planning stays
    near-linear even when thousands of tensors are live at once.
    """

    def __init__(self) -> None:
        self.top = 0  # end of the bytes in use or free below it
        self.peak = 0
        self.by_offset: dict[int, int] = {}  # free block offset -> size
        self.by_end: dict[int, int] = {}  # free block end -> offset
        self.by_size: list[tuple[int, int]] = []  # sorted (size, offset)

    def _add(self, offset: int, size: int) -> None:
        self.by_offset[offset] = size
        self.by_end[offset + size] = offset
        bisect.insort(self.by_size, (size, offset))

    def _take(self, offset: int) -> int:
        size = self.by_offset.pop(offset)
        del self.by_end[offset + size]
        del self.by_size[bisect.bisect_left(self.by_size, (size, offset))]
        return size

    def allocate(self, size: int) -> int:
        i = bisect.bisect_left(self.by_size, (size, -1))
        if i < len(self.by_size):
            block, offset = self.by_size[i]
            self._take(offset)
            if block > size:
                self._add(offset + size, block - size)
            return offset
        offset = self.by_end.get(self.top)
        if offset is not None:  # grow the free block that ends at the top
            self._take(offset)
        else:
            offset = self.top
        self.top = offset + size
        self.peak = max(self.peak, self.top)
        return offset

    def release(self, offset: int, size: int) -> None:
        following = self.by_offset.get(offset + size)
        if following is not None:
            size += self._take(offset + size)
        preceding = self.by_end.get(offset)
        if preceding is not None:
            size += self._take(preceding)
            offset = preceding
        if offset + size == self.top:
            self.top = offset
        else:
            self._add(offset, size)


def _resolve(aliases: Mapping[int, tuple[int, int]], uid: int) -> tuple[int, int]:
    """(root, byte offset in the root) of a tensor, following its chain of views."""
    offset = 0
    while uid in aliases:
        uid, step = aliases[uid]
        offset += step
    return uid, offset


def plan_memory(
    graph: Graph,
    steps: Sequence[tuple[Iterable[int], Iterable[int]]],
    aliases: Mapping[int, tuple[int, int]] | None = None,
) -> MemoryPlan:
    """Arena offsets for every virtual tensor a step writes, along the steps' order.

    ``steps`` gives each step's (reads, writes) — the tensors crossing its
    boundary. A tensor lives from the step that writes it to the last step
    that reads it; tensors internal to a region never appear, so they take
    no memory. ``aliases`` maps a view's uid to (the uid it is part of, byte
    offset): its root is allocated instead, for the whole group's lifetime.
    """
    aliases = aliases or {}
    virtual = {uid for uid, t in graph.tensors.items() if t.is_virtual}
    resolved = {uid: _resolve(aliases, uid) for uid in aliases}
    root_of = {uid: root for uid, (root, _) in resolved.items()}
    last_use: dict[int, int] = {}
    for step, (reads, writes) in enumerate(steps):
        for uid in (*reads, *writes):
            if uid in virtual and root_of.get(uid, uid) in virtual:
                last_use[root_of.get(uid, uid)] = step
    offsets: dict[int, int] = {}
    sizes: dict[int, int] = {}
    arena = _FreeList()
    expiry: dict[int, list[int]] = {}
    for step, (_reads, writes) in enumerate(steps):
        for uid in writes:
            root = root_of.get(uid, uid)
            if uid not in virtual or root not in virtual or root in sizes:
                continue
            size = _align(max(tensor_bytes(graph, root), 1))
            offsets[root], sizes[root] = arena.allocate(size), size
            expiry.setdefault(last_use[root], []).append(root)
        for uid in expiry.pop(step, ()):
            arena.release(offsets[uid], sizes[uid])
    input_views = {uid: (root, offset) for uid, (root, offset) in resolved.items() if root not in virtual}
    for uid, (root, offset) in resolved.items():
        if uid not in input_views:
            offsets[uid] = offsets[root] + offset
    return MemoryPlan(offsets, sizes, arena.peak, sum(sizes.values()), root_of, input_views)
