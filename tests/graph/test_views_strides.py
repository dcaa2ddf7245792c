"""The strides that make a reshape, transpose or slice a view, against NumPy on strided buffers.

The oracle reads the input's buffer through the computed strides and offset
and compares with NumPy's logical result element by element; for reshape it
also asks NumPy whether any view exists (``copy=False`` refuses otherwise).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sigdnn
from sigdnn.graph.layout import packed_strides
from sigdnn.graph.views import reshaped, same_addresses, sliced, transposed, view_layout


@st.composite
def strided_inputs(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Dims and strides of a non-overlapping layout: packed in a random axis order, some axes padded."""
    dims = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    order = draw(st.permutations(range(len(dims))))
    strides = [0] * len(dims)
    step = 1
    for axis in reversed(order):
        strides[axis] = step
        step *= dims[axis] + draw(st.sampled_from([0, 0, 1]))
    return dims, tuple(strides)


def buffer_for(dims: tuple[int, ...], strides: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(flat buffer of distinct values, the logical array seen through the strides)."""
    span = 1 + sum((d - 1) * s for d, s in zip(dims, strides))
    flat = np.arange(span, dtype=np.int64)
    return flat, np.lib.stride_tricks.as_strided(flat, dims, [s * 8 for s in strides])


def seen(flat: np.ndarray, dims: tuple[int, ...], strides: tuple[int, ...], offset: int) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(flat[offset:], dims, [s * 8 for s in strides])


def tensor(dims: tuple[int, ...], strides: tuple[int, ...]) -> sigdnn.Tensor:
    return sigdnn.Graph("g", io_dtype="float32").tensor("x", dims, strides)


def new_dims(draw: st.DrawFn, size: int) -> tuple[int, ...]:
    """A random shape of ``size`` elements: its prime factors dealt into 1-4 axes (some left 1)."""
    factors, n, p = [], size, 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    rank = draw(st.integers(1, 4))
    axes = [draw(st.integers(0, rank - 1)) for _ in factors]
    return tuple(math.prod(f for f, a in zip(factors, axes) if a == k) for k in range(rank))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strided_inputs(), st.data())
def test_reshape_strides_read_the_elements_in_row_major_order_exactly_when_numpy_finds_a_view(inp, data) -> None:
    dims, strides = inp
    flat, x = buffer_for(dims, strides)
    target = new_dims(data.draw, math.prod(dims))
    found = reshaped(tensor(dims, strides), target)
    try:
        np.reshape(x, target, copy=False)
        possible = True
    except ValueError:
        possible = False
    assert (found is not None) == possible, (dims, strides, target)
    if found is not None:
        np.testing.assert_array_equal(seen(flat, target, found[0], found[1]), x.reshape(target))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strided_inputs(), st.data())
def test_transpose_and_slice_strides_read_what_numpy_computes(inp, data) -> None:
    dims, strides = inp
    flat, x = buffer_for(dims, strides)
    perm = data.draw(st.permutations(range(len(dims))))
    view, offset = transposed(tensor(dims, strides), perm)
    want = x.transpose(perm)
    np.testing.assert_array_equal(seen(flat, want.shape, view, offset), want)
    start = [data.draw(st.integers(0, d - 1)) for d in dims]
    step = [data.draw(st.integers(1, 3)) for _ in dims]
    view, offset = sliced(tensor(dims, strides), start, step)
    want = x[tuple(slice(a, None, k) for a, k in zip(start, step))]
    np.testing.assert_array_equal(seen(flat, want.shape, view, offset), want)


def test_reshape_of_a_padded_or_transposed_input_is_no_view_but_splitting_a_contiguous_run_is() -> None:
    assert reshaped(tensor((2, 3), (4, 1)), (6,)) is None  # rows padded to 4
    assert reshaped(tensor((2, 3), (1, 2)), (6,)) is None  # column-major
    assert reshaped(tensor((2, 3), (4, 1)), (2, 3, 1)) == ((4, 1, 1), 0)
    assert reshaped(tensor((6, 5), (8, 1)), (2, 3, 5)) == ((24, 8, 1), 0)
    assert reshaped(tensor((1, 1), (1, 1)), (1,)) == ((1,), 0)
    assert reshaped(tensor((4, 1, 6), (6, 99, 1)), (1, 24, 1)) == ((24, 1, 1), 0)


def test_size_one_axes_never_decide_whether_strides_address_the_same_elements() -> None:
    assert same_addresses((1, 3), (7, 1), (99, 1))
    assert not same_addresses((2, 3), (7, 1), (99, 1))
    assert not same_addresses((2, 3), (3, 1), (3, 1, 1))


@pytest.mark.parametrize("kind", ["transpose", "slice", "reshape"])
def test_view_layout_declares_the_view_strides_on_the_output(kind: str) -> None:
    g = sigdnn.Graph("g", io_dtype="float32")
    x = g.tensor("x", (2, 3, 4), (16, 4, 1))  # samples 16 elements apart: no output's packed strides match
    if kind == "transpose":
        y, want = g.transpose(x, (2, 0, 1)), (1, 16, 4)
    elif kind == "slice":
        y, want = g.slice(x, [slice(None), slice(1, 3), slice(0, 4, 2)]), (16, 4, 2)
    else:
        y, want = g.reshape(x, (2, 3, 2, 2)), (16, 4, 2, 1)
    assert y.strides != want
    assert view_layout(g, y) is y and y.strides == want


def test_view_layout_leaves_a_reshape_no_strides_can_serve() -> None:
    g = sigdnn.Graph("g", io_dtype="float32")
    x = g.tensor("x", (2, 3, 4), layout="ROW_MAJOR").set_stride((1, 8, 2))
    y = g.reshape(x, (24,))
    before = y.strides
    assert view_layout(g, y).strides == before == packed_strides((24,))
    z = g.exp(x).set_stride((12, 4, 1))
    assert view_layout(g, z).strides == (12, 4, 1)  # not a data-movement node: untouched


def test_view_layout_leaves_strides_the_graph_checks_would_call_overlapping() -> None:
    g = sigdnn.Graph("g", io_dtype="float32")
    y = g.slice(g.tensor("x", (2, 3)), [slice(None), slice(0, 3, 2)])
    assert sliced(g.tensors[1], (0, 0), (1, 2)) == ((3, 2), 0)
    assert view_layout(g, y).strides == (2, 1)
