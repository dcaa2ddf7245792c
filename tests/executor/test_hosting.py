"""Caller outputs as scratch (sigdnn/executor/hosting.py): the choice checked against brute-force oracles.

A guest must die before its host is first written, fit inside the host at
an aligned offset, and share bytes with no guest alive at the same time;
the choice must never raise the live peak, and stops only when nothing
live at the peak fits anywhere (checked by trying every aligned offset).
A host lends its buffer in place only when it is aligned and overlaps no
other caller buffer (checked against every pair).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sigdnn.executor.hosting import ALIGNMENT, Host, choose_guests, in_place


def live_profile(lifetimes, sizes, steps, skip=()):
    return [sum(sizes[u] for u, (a, b) in lifetimes.items() if a <= s <= b and u not in skip) for s in range(steps)]


def fits_somewhere(uid, lifetimes, sizes, hosts, placed):
    """Brute force: every host not written before ``uid`` dies, every aligned offset inside it."""
    start, end = lifetimes[uid]
    for host, spec in hosts.items():
        if spec.first_write <= end:
            continue
        others = [
            (offset, sizes[g]) for g, (h, offset) in placed.items()
            if h == host and lifetimes[g][0] <= end and start <= lifetimes[g][1]
        ]  # fmt: skip
        for offset in range(0, spec.capacity - sizes[uid] + 1, ALIGNMENT):
            if all(offset + sizes[uid] <= o or o + s <= offset for o, s in others):
                return True
    return False


@st.composite
def problems(draw):
    steps = draw(st.integers(1, 12))
    n = draw(st.integers(0, 10))
    lifetimes, sizes = {}, {}
    for uid in range(n):
        start = draw(st.integers(0, steps - 1))
        lifetimes[uid] = (start, draw(st.integers(start, steps - 1)))
        sizes[uid] = draw(st.integers(1, 3 * ALIGNMENT))
    hosts = {
        100 + i: Host(draw(st.integers(1, 6 * ALIGNMENT)), draw(st.integers(0, steps)))
        for i in range(draw(st.integers(0, 4)))
    }
    return lifetimes, sizes, hosts, steps


@settings(max_examples=400, deadline=None)
@given(problems())
def test_guests_are_valid_never_raise_the_peak_and_stop_only_when_nothing_at_the_peak_fits(problem):
    lifetimes, sizes, hosts, steps = problem
    placed = choose_guests(lifetimes, sizes, hosts, steps)
    for uid, (host, offset) in placed.items():
        start, end = lifetimes[uid]
        assert end < hosts[host].first_write
        assert offset % ALIGNMENT == 0 and offset >= 0 and offset + sizes[uid] <= hosts[host].capacity
        for other, (h, o) in placed.items():
            if other != uid and h == host and lifetimes[other][0] <= end and start <= lifetimes[other][1]:
                assert offset + sizes[uid] <= o or o + sizes[other] <= offset, (uid, other)
    before = live_profile(lifetimes, sizes, steps)
    after = live_profile(lifetimes, sizes, steps, skip=placed)
    assert all(a <= b for a, b in zip(after, before))
    if after and max(after):
        peak = after.index(max(after))
        at_peak = [u for u, (a, b) in lifetimes.items() if a <= peak <= b and u not in placed]
        assert not any(fits_somewhere(u, lifetimes, sizes, hosts, placed) for u in at_peak)


def test_a_hand_worked_backward_pass():
    """Steps 0-5; two 1 KiB activations die at step 3, the 2 KiB gradient output is first written at step 4:
    both move into it, side by side (the peak was their 2 KiB plus a 1 KiB tensor at steps 2-5, now 1 KiB)."""
    lifetimes = {1: (0, 3), 2: (1, 3), 3: (2, 5)}
    sizes = {1: 1024, 2: 1024, 3: 1024}
    hosts = {9: Host(2048, 4)}
    assert choose_guests(lifetimes, sizes, hosts, 6) == {1: (9, 0), 2: (9, 1024)}
    assert choose_guests(lifetimes, sizes, {9: Host(2048, 3)}, 6) == {}  # written at step 3, when they are read
    assert choose_guests(lifetimes, sizes, {9: Host(2047, 4)}, 6) == {1: (9, 0)}  # room for one only


def test_a_guest_takes_a_gap_that_fits_it_exactly():
    """t1 and t3 never meet: t3 goes below t2, into the 256 bytes t1 held (a host of 512 has no other room)."""
    lifetimes, sizes = {1: (0, 1), 2: (0, 3), 3: (2, 3)}, {1: 256, 2: 256, 3: 256}
    assert choose_guests(lifetimes, sizes, {9: Host(512, 4)}, 4) == {1: (9, 0), 2: (9, 256), 3: (9, 0)}


def test_the_largest_tensor_at_the_peak_moves_first():
    lifetimes, sizes = {1: (0, 1), 2: (0, 1)}, {1: 256, 2: 512}
    assert choose_guests(lifetimes, sizes, {9: Host(512, 2)}, 2) == {2: (9, 0)}
    assert choose_guests(lifetimes, sizes, {9: Host(512, 2)}, 0) == {}  # no steps, nothing alive


def test_the_tightest_host_takes_a_guest_first():
    """Of two hosts, the one written earlier (freeing fewer guests) is offered first, keeping the later one
    for tensors that live longer."""
    lifetimes, sizes = {1: (0, 1), 2: (0, 4)}, {1: 512, 2: 512}
    hosts = {7: Host(512, 2), 8: Host(512, 9)}
    assert choose_guests(lifetimes, sizes, hosts, 5) == {1: (7, 0), 2: (8, 0)}


@st.composite
def buffers(draw):
    n = draw(st.integers(1, 8))
    spans = {
        uid: (draw(st.sampled_from((0, 256, 512, 768, 1024, 1030, 2048))), draw(st.integers(0, 900)))
        for uid in range(n)
    }
    return spans, draw(st.sets(st.sampled_from(range(n))))


@settings(max_examples=400, deadline=None)
@given(buffers())
def test_a_host_lends_in_place_exactly_when_aligned_and_overlapping_no_other_buffer(case):
    spans, hosts = case

    def overlaps(a, b):
        (sa, na), (sb, nb) = spans[a], spans[b]
        return na > 0 and nb > 0 and sa < sb + nb and sb < sa + na

    want = {h for h in hosts if spans[h][0] % ALIGNMENT == 0 and not any(overlaps(h, o) for o in spans if o != h)}
    assert in_place(spans, hosts) == want


def test_an_output_given_the_input_s_memory_lends_nothing():
    spans = {1: (4096, 1024), 2: (4096, 1024), 3: (8192, 512)}
    assert in_place(spans, {2, 3}) == {3}
    assert in_place({1: (4096, 2048), 2: (5120, 256)}, {1, 2}) == set()  # one inside the other
    assert in_place({1: (4096 + 2, 256)}, {1}) == set()  # misaligned
    assert in_place({1: (4096, 256), 2: (4352, 256)}, {1, 2}) == {1, 2}  # adjacent, not overlapping


def chain_graph(n: int):
    """x -> t1 -> ... -> tn -> y, float32 [1024] (4 KiB each); uids in order, y last."""
    import sigdnn

    g = sigdnn.Graph("chain", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    v = g.tensor("x", dims=(1024,))
    for i in range(n + 1):
        v = g.pointwise("relu_fwd", v, name=f"n{i}")
    v.set_output(True)
    return g, [t.uid for t in g.tensors.values()]


def test_plan_memory_keeps_guests_only_where_they_lower_the_arena():
    from sigdnn.executor.memory_plan import plan_memory

    g, (x, t1, t2, y) = chain_graph(2)
    steps = [((x,), (t1,)), ((t1,), (t2,)), ((t2,), (y,))]  # peak at step 1: t1 and t2
    plan = plan_memory(g, steps, lenders=[y])
    assert plan.hosted == {t1: (y, 0)} and plan.peak_bytes == 4096 and t1 not in plan.offsets
    assert plan_memory(g, steps).peak_bytes == 8192 and not plan_memory(g, steps).hosted
    g, (x, t1, t2, t3, y) = chain_graph(3)
    steps = [((x,), (t1,)), ((t1,), (t2,)), ((t2,), (t3,)), ((t3,), (y,))]
    # t1 fits in y but t2 and t3 still meet at step 2: hosting t1 would not lower the 8 KiB arena
    plan = plan_memory(g, steps, lenders=[y])
    assert plan.hosted == {} and plan.peak_bytes == 8192 and t1 in plan.offsets


def test_a_view_of_a_guest_lives_at_its_offset_in_the_host():
    from sigdnn.executor.memory_plan import plan_memory

    g, (x, t1, t2, y) = chain_graph(2)
    steps = [((x,), (t1,)), ((t1,), (t2,)), ((t2,), (y,))]
    plan = plan_memory(g, steps, aliases={t2: (t1, 0)}, lenders=[y])  # t2 a view of t1: one root alive 0-2
    assert plan.hosted == {} and plan.offsets == {t1: 0, t2: 0}  # the group lives until y is written
    g, (x, t1, t2, t3, y) = chain_graph(3)
    steps = [((x,), (t1,)), ((t1,), (t2,)), ((t2,), (t3,)), ((t3,), (y,))]
    plan = plan_memory(g, steps, aliases={t2: (t1, 256)}, lenders=[y])  # group t1 + t2 alive 0-2, t3 2-3
    assert plan.hosted == {t1: (y, 0), t2: (y, 256)} and plan.peak_bytes == 4096


def test_only_a_dense_output_may_lend():
    """Scratch must stay inside bytes the caller's tensor owns: a row-padded or a broadcast layout lends none."""
    import sigdnn
    from sigdnn.executor.memory_plan import can_host

    g = sigdnn.Graph("layouts", io_dtype="float32")
    dense = g.tensor("dense", dims=(3, 5), strides=(1, 3))  # column-major: dense in another order
    padded = g.tensor("padded", dims=(3, 5), strides=(8, 1))  # a gap after each row
    broadcast = g.tensor("broadcast", dims=(2, 2), strides=(0, 3))  # spans 4 elements, but twice each
    assert [can_host(g, t.uid) for t in (dense, padded, broadcast)] == [True, False, False]


def test_at_most_512_guests_move():
    """A flat profile (a chain: one tensor a step) could place a guest per step; prepare stops at the bound."""
    n = 600  # the bound is 512 (stated here, not read from the module)
    lifetimes, sizes = {uid: (uid, uid) for uid in range(n)}, dict.fromkeys(range(n), 256)
    placed = choose_guests(lifetimes, sizes, {n: Host(256, n)}, n)
    assert len(placed) == 512 and set(placed.values()) == {(n, 0)}
