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

On the GPU, an intermediate that dies before a caller output is first
written may live in that output's memory instead (``sigdnn.executor.hosting``:
``hosted``, made by each run from the output's buffer like an input view).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Mapping, Sequence

import attrs

from sigdnn.executor.hosting import Host, choose_guests
from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import is_non_overlapping, span_elements

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
    # intermediate uid -> (caller's output uid, byte offset in it): scratch a run places in an output not yet written
    hosted: dict[int, tuple[int, int]] = attrs.field(factory=dict)


def tensor_bytes(graph: Graph, uid: int) -> int:
    t = graph.tensors[uid]
    return span_elements(t.dims, t.strides) * graph.dtype_of(t).itemsize


def can_host(graph: Graph, uid: int) -> bool:
    """Whether a caller output may lend its memory: dense (its span is its elements, so scratch stays inside
    bytes it owns and its producer overwrites all of them)."""
    t = graph.tensors[uid]
    return span_elements(t.dims, t.strides) == t.size and is_non_overlapping(t.dims, t.strides)


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
    lenders: Iterable[int] = (),
) -> MemoryPlan:
    """Arena offsets for every virtual tensor a step writes, along the steps' order.

    ``steps`` gives each step's (reads, writes) — the tensors crossing its
    boundary. A tensor lives from the step that writes it to the last step
    that reads it; tensors internal to a region never appear, so they take
    no memory. ``aliases`` maps a view's uid to (the uid it is part of, byte
    offset): its root is allocated instead, for the whole group's lifetime.
    ``lenders``: caller outputs whose memory may hold intermediates until
    they are written (``can_host``; the GPU backend's).
    """
    aliases = aliases or {}
    virtual = {uid for uid, t in graph.tensors.items() if t.is_virtual}
    resolved = {uid: _resolve(aliases, uid) for uid in aliases}
    root_of = {uid: root for uid, (root, _) in resolved.items()}
    first_write: dict[int, int] = {}
    last_use: dict[int, int] = {}
    for step, (reads, writes) in enumerate(steps):
        for uid in writes:
            first_write.setdefault(root_of.get(uid, uid), step)
        for uid in (*reads, *writes):
            if uid in virtual and root_of.get(uid, uid) in virtual:
                last_use[root_of.get(uid, uid)] = step
    lifetimes = {root: (first, last_use[root]) for root, first in first_write.items() if root in last_use}
    sizes = {root: _align(max(tensor_bytes(graph, root), 1)) for root in lifetimes}
    offsets, peak = _arena(lifetimes, sizes, len(steps))
    hosts = {uid: Host(tensor_bytes(graph, uid), first_write[uid]) for uid in lenders if uid in first_write}
    guests = choose_guests(lifetimes, {uid: tensor_bytes(graph, uid) for uid in lifetimes}, hosts, len(steps))
    if guests:  # kept only where they lower the arena: each ties its steps to the caller's buffer
        remaining = {root: span for root, span in lifetimes.items() if root not in guests}
        hosted_offsets, hosted_peak = _arena(remaining, sizes, len(steps))
        if hosted_peak < peak:
            offsets, peak = hosted_offsets, hosted_peak
        else:
            guests = {}
    input_views = {uid: (root, offset) for uid, (root, offset) in resolved.items() if root not in virtual}
    hosted = dict(guests)
    for uid, (root, offset) in resolved.items():
        if root in guests:
            host, at = guests[root]
            hosted[uid] = (host, at + offset)
        elif uid not in input_views:
            offsets[uid] = offsets[root] + offset
    return MemoryPlan(offsets, sizes, peak, sum(sizes.values()), root_of, input_views, hosted)


def _arena(
    lifetimes: Mapping[int, tuple[int, int]], sizes: Mapping[int, int], steps: int
) -> tuple[dict[int, int], int]:
    """Best-fit offsets of tensors alive over steps [first, last], and the arena's peak: at each step the
    tensors it writes are placed (in the order given), then those it reads last are released."""
    writes: list[list[int]] = [[] for _ in range(steps)]
    expiry: list[list[int]] = [[] for _ in range(steps)]
    for uid, (first, last) in lifetimes.items():
        writes[first].append(uid)
        expiry[last].append(uid)
    arena = _FreeList()
    offsets: dict[int, int] = {}
    for step in range(steps):
        for uid in writes[step]:
            offsets[uid] = arena.allocate(sizes[uid])
        for uid in expiry[step]:
            arena.release(offsets[uid], sizes[uid])
    return offsets, arena.peak
