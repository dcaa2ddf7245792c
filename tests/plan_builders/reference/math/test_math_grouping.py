"""Grouped: x as (A, K, B) for per-K statistics, checked element by element against brute-force loops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sigdnn.plan_builders.reference.math.grouping import Grouped


@st.composite
def layouts(draw):
    """x (values 0..n-1, so each names its own position) in a random memory order, and the reduced axes."""
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    order = draw(st.permutations(range(rank)))  # memory order: order[0] outermost
    base = np.arange(int(np.prod(shape))).reshape([shape[a] for a in order])
    x = base.transpose(np.argsort(order))  # logical shape, strides of that memory order
    reduced = draw(st.sets(st.integers(0, rank - 1)))
    negative = draw(st.booleans())  # axes may be given counted from the end
    return x, tuple(a - rank if negative else a for a in sorted(reduced)), {a % rank for a in reduced}


def kept_index(x: np.ndarray, reduced: set[int], position: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(i for a, i in enumerate(position) if a not in reduced)


@settings(max_examples=150, deadline=None)
@given(layouts())
def test_each_k_holds_exactly_the_elements_of_one_kept_index(case) -> None:
    x, reduced, red = case
    g = Grouped(x, reduced)
    a, k, b = g.dims
    assert g.view.shape == (a, k, b) and g.count == a * b
    assert a * b == int(np.prod([x.shape[i] for i in red])) and a * k * b == x.size
    groups: dict[tuple[int, ...], set[int]] = {}
    for position in itertools.product(*(range(d) for d in x.shape)):
        groups.setdefault(kept_index(x, red, position), set()).add(int(x[position]))
    columns = {frozenset(g.view[:, j, :].ravel().tolist()) for j in range(k)}
    assert columns == {frozenset(v) for v in groups.values()}
    np.testing.assert_array_equal(g.restore(g.view), x)


@settings(max_examples=150, deadline=None)
@given(layouts())
def test_stat_puts_each_statistic_on_its_kept_index(case) -> None:
    x, reduced, red = case
    g = Grouped(x, reduced)
    per_k = g.view.min(axis=(0, 2)).astype(np.float64)  # min over each K: an element of that group
    stat = g.stat(per_k)
    assert stat.shape == tuple(1 if i in red else d for i, d in enumerate(x.shape))
    assert stat.flags.c_contiguous
    want = x.min(axis=tuple(sorted(red)), keepdims=True) if red else x
    np.testing.assert_array_equal(stat, want)


@settings(max_examples=150, deadline=None)
@given(layouts(), st.data())
def test_param_broadcasts_like_numpy(case, data) -> None:
    x, reduced, _ = case
    g = Grouped(x, reduced)
    keep = data.draw(st.lists(st.booleans(), min_size=x.ndim, max_size=x.ndim))
    p_shape = tuple(d if k else 1 for d, k in zip(x.shape, keep))
    drop = data.draw(st.integers(0, sum(1 for _ in itertools.takewhile(lambda d: d == 1, p_shape))))
    p = np.arange(1, int(np.prod(p_shape)) + 1, dtype=np.float64).reshape(p_shape)
    p = p.reshape(p_shape[drop:])  # leading 1s may be left out, as NumPy broadcasting allows
    p3 = g.param(p)
    assert all(d in (1, full) for d, full in zip(p3.shape, g.dims))
    want = np.broadcast_to(p, x.shape)
    np.testing.assert_array_equal(g.restore(np.broadcast_to(p3, g.dims).copy()), want)


def test_reduced_kept_reduced_memory_order_is_a_view_not_a_copy() -> None:
    """batchnorm NCHW (N | C | HW), NHWC (NHW | C) and layernorm (rows | features): no copy."""
    nchw = np.arange(2 * 3 * 4 * 5, dtype=np.float64).reshape(2, 3, 4, 5)
    nhwc = np.ascontiguousarray(nchw.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    for x, reduced in [(nchw, (0, 2, 3)), (nhwc, (0, 2, 3)), (nchw, (1, 2, 3)), (nchw, (3,))]:
        g = Grouped(x, reduced)
        assert np.shares_memory(g.view, x), reduced
    interleaved = Grouped(nchw, (0, 2))  # N, H reduced; C, W kept: interleaved, one copy
    assert interleaved.dims == (1, 15, 8)


def test_a_scalar_is_one_group_of_one() -> None:
    g = Grouped(np.array(7.0), ())
    assert g.dims == (1, 1, 1) and g.count == 1 and g.perm == () and g.inverse == ()
    assert g.restore(g.view).shape == () and float(g.restore(g.view)) == 7.0


@settings(max_examples=200, deadline=None)
@given(layouts())
def test_memory_order_in_at_most_reduced_kept_reduced_runs_is_a_view(case) -> None:
    """The documented promise, for every layout: when x's memory order (outermost first) reads the
    reduced and kept axes in runs reduced | kept | reduced at most, (A, K, B) is a view of x, not a copy."""
    x, reduced, red = case
    real = [a for a in range(x.ndim) if x.shape[a] != 1]
    by_memory = sorted(real, key=lambda a: -x.strides[a])
    runs = [flag for i, flag in enumerate(a in red for a in by_memory) if i == 0 or flag != (by_memory[i - 1] in red)]
    if runs in ([], [True], [False], [True, False], [False, True], [True, False, True]):
        assert np.shares_memory(Grouped(x, reduced).view, x), (x.shape, x.strides, reduced)


def in_memory_order(shape: tuple[int, ...], order: tuple[int, ...]) -> np.ndarray:
    """An array of logical ``shape`` whose memory order (outermost first) is ``order``."""
    return np.arange(int(np.prod(shape))).reshape([shape[a] for a in order]).transpose(np.argsort(order))


@pytest.mark.parametrize(
    ("order", "reduced"),
    [
        ((1, 0, 2), ()),  # kept only, memory order not logical
        ((1, 0, 2), (1, 0)),  # reduced only
        ((2, 1, 0), (2,)),  # reduced | kept, kept axes swapped
        ((1, 0, 2), (2,)),  # kept | reduced, kept axes swapped
        ((2, 1, 0), (1, 0)),  # kept | reduced, reduced axes swapped
        ((0, 2, 1, 3), (0, 3)),  # reduced | kept | reduced, kept axes swapped
    ],
)
def test_each_run_pattern_is_a_view_in_any_axis_order(order: tuple[int, ...], reduced: tuple[int, ...]) -> None:
    x = in_memory_order((2, 3, 4, 5)[: len(order)], order)
    g = Grouped(x, reduced)
    assert np.shares_memory(g.view, x)
    np.testing.assert_array_equal(g.restore(g.view), x)


def test_regroup_is_a_view_when_the_strides_allow_and_none_otherwise() -> None:
    """An output laid out like x regroups as a view of itself (results written through it land in the
    output); one laid out otherwise cannot, and regroup says so instead of handing back a copy."""
    x = np.arange(3 * 4 * 5, dtype=np.float64).reshape(3, 4, 5)
    g = Grouped(x, (2,))  # (A, K, B) = (1, 12, 5)
    like_x = np.zeros((3, 4, 5), np.float32)
    view = g.regroup(like_x)
    assert view is not None and np.shares_memory(view, like_x)
    assert view.shape == g.dims and not view.any()
    view[...] = g.view
    np.testing.assert_array_equal(like_x, x)
    swapped = np.zeros((4, 3, 5), np.float32).transpose(1, 0, 2)  # logical (3, 4, 5): the kept axes do not merge
    assert g.regroup(swapped) is None
