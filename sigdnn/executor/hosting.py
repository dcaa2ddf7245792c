"""Caller outputs as scratch: an intermediate that dies before an output is written may live in that output's memory.

A backward graph's weight gradients are written late, yet the caller
allocates them before the run; until its producer writes it, an output's
memory holds nothing anyone reads. The GPU memory plan places there the
intermediates whose last reader runs before that write, lowering the arena
(a Llama layer's forward + backward: its q, k, v projections live in the
buffers of their own weight gradients until the attention backward has
read them).

Only an output whose declared layout is dense (its span is its elements)
hosts, so scratch never touches a byte the caller's tensor does not own,
and its producer overwrites every byte it lent. At run time an output
hosts in place only where its buffer is usable (``in_place``); otherwise
its guests move, at the same offsets, to a buffer of the output's size that
the GPU memory provides instead (gpu_memory, gpu_buffers.lending_buffers).

The choice is greedy on the peak: while some intermediate live at the
step where the arena's live bytes peak fits in an output not yet written
by its last reader, the largest such one is placed there (at the lowest
offset free of every guest alive at the same time), and the peak is
found again (up to ``MOST_GUESTS`` placements).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import attrs

ALIGNMENT = 256  # bytes: a guest starts where an arena tensor could (memory_plan.ALIGNMENT)
# each placement scans the steps for the peak: a bound keeps prepare near-linear on graphs of 10^5 steps whose
# live bytes are flat (a chain); a model's backward places few (a Llama layer's: 8 tensors)
MOST_GUESTS = 512


@attrs.frozen
class Host:
    """A caller output that may hold intermediates: its bytes, and the step that first writes it."""

    capacity: int
    first_write: int


@attrs.frozen
class _Guest:
    start: int
    end: int
    offset: int
    size: int


def _placement(guests: list[_Guest], start: int, end: int, size: int, capacity: int) -> int | None:
    """The lowest aligned offset where ``size`` bytes alive over steps [start, end] meet no guest alive then."""
    during = sorted((g.offset, g.offset + g.size) for g in guests if g.start <= end and start <= g.end)
    offset = 0
    for low, high in during:
        if offset + size <= low:
            break
        offset = max(offset, -(-high // ALIGNMENT) * ALIGNMENT)
    return offset if offset + size <= capacity else None


def choose_guests(
    lifetimes: Mapping[int, tuple[int, int]], sizes: Mapping[int, int], hosts: Mapping[int, Host], steps: int
) -> dict[int, tuple[int, int]]:
    """Intermediates to move into caller outputs: root uid -> (output uid, byte offset in it).

    ``lifetimes`` gives each intermediate (that owns memory) its first and
    last step, ``sizes`` its bytes (its strided span), ``hosts`` the outputs
    that may lend their memory; ``steps`` is how many steps the plan runs.
    """
    latest = max((host.first_write for host in hosts.values()), default=0)
    widest = max((host.capacity for host in hosts.values()), default=0)
    movable = {uid: span for uid, span in lifetimes.items() if span[1] < latest and sizes[uid] <= widest}
    if not movable or not steps:
        return {}
    live = [0] * steps
    for uid, (start, end) in lifetimes.items():
        for step in range(start, end + 1):
            live[step] += sizes[uid]
    guests: dict[int, list[_Guest]] = {uid: [] for uid in hosts}
    placed: dict[int, tuple[int, int]] = {}
    # a host whose first write comes earlier frees fewer guests: offer the tightest fit first
    order = sorted(hosts, key=lambda uid: (hosts[uid].first_write, hosts[uid].capacity, uid))
    while len(placed) < MOST_GUESTS:
        peak = max(range(steps), key=live.__getitem__)
        present = sorted(
            (uid for uid, (start, end) in movable.items() if start <= peak <= end and uid not in placed),
            key=lambda uid: (-sizes[uid], uid),
        )
        found = _first_fit(present, lifetimes, sizes, hosts, guests, order)
        if found is None:
            return placed
        uid, host, offset = found
        start, end = lifetimes[uid]
        guests[host].append(_Guest(start, end, offset, sizes[uid]))
        placed[uid] = (host, offset)
        for step in range(start, end + 1):
            live[step] -= sizes[uid]
    return placed


def _first_fit(
    present: Iterable[int],
    lifetimes: Mapping[int, tuple[int, int]],
    sizes: Mapping[int, int],
    hosts: Mapping[int, Host],
    guests: Mapping[int, list[_Guest]],
    order: list[int],
) -> tuple[int, int, int] | None:
    """The largest of ``present`` some host can take, with that host and offset; None when none fits."""
    for uid in present:
        start, end = lifetimes[uid]
        for host in order:
            if hosts[host].first_write <= end:
                continue
            offset = _placement(guests[host], start, end, sizes[uid], hosts[host].capacity)
            if offset is not None:
                return uid, host, offset
    return None


def in_place(spans: Mapping[int, tuple[int, int]], hosts: Iterable[int]) -> set[int]:
    """The hosts whose caller buffer can take their guests this run: aligned as the arena is, and overlapping
    no other caller buffer (an output given the memory of an input, as for an in-place update, or of another
    output, lends none: its guests would overwrite what is read or written there).

    ``spans`` maps every caller buffer's uid to its (address, bytes). Sorted
    by address, a span overlaps another exactly when it starts below the
    furthest end before it or ends past the start of the next.
    """
    ordered = sorted((start, start + nbytes, uid) for uid, (start, nbytes) in spans.items() if nbytes)
    clashing: set[int] = set()
    reach = None
    for i, (start, end, uid) in enumerate(ordered):
        if (reach is not None and start < reach) or (i + 1 < len(ordered) and ordered[i + 1][0] < end):
            clashing.add(uid)
        reach = end if reach is None else max(reach, end)
    return {uid for uid in hosts if uid not in clashing and spans[uid][0] % ALIGNMENT == 0}
