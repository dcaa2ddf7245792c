"""The order steps run in: any valid order computes the same values, but not at the same peak memory.

Two orders are candidates, and prepare keeps the one whose memory plan
peaks lower. The greedy one runs, among the steps that are ready, the one
that frees the most intermediate memory net of what it allocates (a
backward graph built breadth-first must not hold every activation at once);
ties keep the order the graph's nodes came in. The arrival order runs the
ready step that came first in the graph: a locally greedy choice can start
a backward pass's large gradients before the forward pass has freed its
own (a Llama layer's fused region of forward and backward pointwise ops:
740 MiB greedy against 654 in arrival order).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence


def memory_aware_order(
    reads: Sequence[Sequence[int]],
    writes: Sequence[Sequence[int]],
    rank: Sequence[int],
    sizes: Mapping[int, int],
) -> list[int]:
    """A topological order of units (steps) given what each reads and writes.

    ``sizes`` holds the bytes of the tensors the executor allocates
    (virtual ones); others cost nothing. ``rank`` breaks ties (lower first).
    The units must form a DAG through their tensors (prepare has checked).
    """
    n = len(reads)
    producer = {uid: u for u in range(n) for uid in writes[u]}
    readers: dict[int, list[int]] = {}
    waiting = [0] * n
    successors: list[list[int]] = [[] for _ in range(n)]
    for u in range(n):
        for uid in dict.fromkeys(reads[u]):
            readers.setdefault(uid, []).append(u)
            p = producer.get(uid)
            if p is not None:
                successors[p].append(u)
                waiting[u] += 1
    remaining = {uid: len(rs) for uid, rs in readers.items()}
    allocates = [sum(sizes.get(uid, 0) for uid in writes[u]) for u in range(n)]

    def score(u: int) -> int:
        freed = sum(sizes.get(uid, 0) for uid in dict.fromkeys(reads[u]) if remaining[uid] == 1)
        return freed - allocates[u]

    # A step's score only rises (more of what it reads becomes its to free), so a re-ranked entry
    # pops before the stale one, which is then skipped as done.
    ready: list[tuple[int, int, int]] = []

    def push(u: int) -> None:
        heapq.heappush(ready, (-score(u), rank[u], u))

    for u in range(n):
        if waiting[u] == 0:
            push(u)
    order: list[int] = []
    while ready:
        _, _, u = heapq.heappop(ready)
        if waiting[u] < 0:
            continue
        waiting[u] = -1  # done
        order.append(u)
        for uid in dict.fromkeys(reads[u]):
            remaining[uid] -= 1
            if remaining[uid] == 1 and sizes.get(uid, 0):
                last = next(r for r in readers[uid] if waiting[r] >= 0)
                if waiting[last] == 0:
                    push(last)  # it now frees this tensor: re-rank it
        for s in successors[u]:
            waiting[s] -= 1
            if waiting[s] == 0:
                push(s)
    return order


def arrival_order(reads: Sequence[Sequence[int]], writes: Sequence[Sequence[int]], rank: Sequence[int]) -> list[int]:
    """The topological order of units that keeps the graph's own as far as it can: the ready unit of lowest
    ``rank`` first (the greedy order where nothing costs memory: every score ties)."""
    return memory_aware_order(reads, writes, rank, {})


def candidate_orders(
    reads: Sequence[Sequence[int]], writes: Sequence[Sequence[int]], rank: Sequence[int], sizes: Mapping[int, int]
) -> list[list[int]]:
    """The distinct orders prepare plans memory for, the greedy one first (it is kept where the peaks tie)."""
    greedy, arrival = memory_aware_order(reads, writes, rank, sizes), arrival_order(reads, writes, rank)
    return [greedy] if arrival == greedy else [greedy, arrival]
