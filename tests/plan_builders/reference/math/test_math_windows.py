"""windows.py's pieces one at a time, against index loops and hand-worked values.

The convolution and pooling tests check what these pieces compute together;
here each piece is held to its own docstring: the layout it promises (a
choice that changes speed and memory, not values, so no end-to-end result
can see it), the element each index reads, the chunks it hands out.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from sigdnn.plan_builders.reference.math import windows as win


def nhwc(shape: tuple[int, ...]) -> np.ndarray:
    """A logical (N, C, *S) array stored with C innermost, values 0, 1, 2, ... in logical order."""
    a = np.arange(float(np.prod(shape))).reshape(shape)
    stored = np.ascontiguousarray(np.moveaxis(a, 1, -1))
    return np.moveaxis(stored, -1, 1)


def test_out_size_hand_worked() -> None:
    assert win.out_size(5, 0, 0, 3, 1, 1) == 3
    assert win.out_size(5, 1, 1, 3, 1, 1) == 5
    assert win.out_size(7, 0, 0, 3, 2, 1) == 3  # windows at 0, 2, 4
    assert win.out_size(8, 0, 0, 3, 2, 1) == 3  # a partial last window (6, 7) is dropped
    assert win.out_size(7, 0, 0, 3, 1, 2) == 3  # span 5: windows at 0, 1, 2
    assert win.out_size(4, 2, 0, 2, 3, 1) == 2  # padded length 6, windows at 0 and 3


def test_chunk_bytes_aims_at_a_cache_sized_chunk_and_grows_only_for_deep_rows() -> None:
    small = win.chunk_bytes(8)
    assert 1 << 20 <= small <= 32 << 20  # "stays in the last-level cache", big enough for a full-speed GEMM
    assert win.chunk_bytes(1) == small  # shallow rows: the same target
    deep = small // 1000  # positions this deep fill the target with fewer than 2048 of them
    assert win.chunk_bytes(deep) == 2048 * deep
    assert win.chunk_bytes(10**9) == win.chunk_bytes(10**7) >= 32 << 20  # the cap
    assert win.chunk_bytes(10**9) <= 256 << 20


def test_channels_last_reads_the_strides() -> None:
    assert not win.channels_last(np.zeros((2, 3, 4, 5)))
    assert win.channels_last(nhwc((2, 3, 4, 5)))
    assert win.channels_last(nhwc((2, 3, 4)))  # one spatial axis
    assert win.channels_last(nhwc((2, 3, 4, 5))[:, :, ::-1, ::-1])  # negative strides: their size counts
    assert win.channels_last(np.zeros((2, 3, 1, 1)))  # no spatial extent: channels are innermost
    assert not win.channels_last(nhwc((2, 1, 4, 5)))  # one channel: nothing to be last
    assert not win.channels_last(np.zeros((2, 3)))
    assert win.channels_last(np.zeros((2, 3, 1, 1))) is True and win.channels_last(np.zeros((2, 3))) is False
    assert win.channels_last(nhwc((2, 2, 4, 5)))  # two channels
    one_channel_of_two = np.moveaxis(np.zeros((2, 4, 5, 2))[..., :1], -1, 1)  # C stride 8 < every spatial one
    assert not win.channels_last(one_channel_of_two)  # yet one channel is a trivial axis: not channels last
    nhcw = np.zeros((2, 4, 3, 5)).transpose(0, 2, 1, 3)  # C between H (outer) and W (inner)
    assert not win.channels_last(nhcw)
    nwch = np.zeros((2, 5, 3, 4)).transpose(0, 2, 3, 1)  # the first spatial axis innermost
    assert not win.channels_last(nwch)
    unit_first = as_strided(np.zeros(60), shape=(2, 3, 1, 5), strides=(240, 8, 8, 24))  # a size-1 axis's stride
    assert win.channels_last(unit_first)  # never counts


@pytest.mark.parametrize("last", [False, True])
def test_empty_like_layout_stores_channels_where_asked(last: bool) -> None:
    a = win.empty_like_layout((2, 3, 4, 5), last)
    assert a.shape == (2, 3, 4, 5) and a.dtype == np.float64
    item = a.itemsize
    want = (4 * 5 * 3 * item, item, 5 * 3 * item, 3 * item) if last else (60 * item, 20 * item, 5 * item, item)
    assert a.strides == want


def test_pad_fills_the_border_and_keeps_the_interior() -> None:
    x = np.arange(1.0, 7.0).reshape(1, 1, 2, 3)
    got = win.pad(x, (1, 0), (0, 2))
    want = np.zeros((1, 1, 3, 5))
    want[0, 0, 1:, :3] = x[0, 0]
    np.testing.assert_array_equal(got, want)
    assert not np.signbit(got).any()  # the default is +0
    got = win.pad(x, (0, 1), (1, 0), value=-np.inf)
    want = np.full((1, 1, 3, 4), -np.inf)
    want[0, 0, :2, 1:] = x[0, 0]
    np.testing.assert_array_equal(got, want)
    only_post = win.pad(x, (0, 0), (0, 1), value=7.0)
    assert only_post.shape == (1, 1, 2, 4) and (only_post[..., 3] == 7).all()


def test_pad_without_padding_is_the_input_itself() -> None:
    x = np.ones((1, 2, 3))
    assert win.pad(x, (0,), (0,)) is x


@pytest.mark.parametrize("last", [None, False, True])
def test_pad_keeps_or_takes_the_layout(last: bool | None) -> None:
    x = nhwc((2, 3, 2, 2))
    got = win.pad(x, (1, 1), (1, 1), last=last)
    np.testing.assert_array_equal(got[:, :, 1:3, 1:3], x)
    assert win.channels_last(got) == (True if last is None else last)
    y = np.arange(24.0).reshape(2, 3, 2, 2)
    assert not win.channels_last(win.pad(y, (1, 0), (0, 0)))


@pytest.mark.parametrize("writeable", [False, True])
def test_windows_element_is_the_documented_input_element(writeable: bool) -> None:
    n, c, groups, size = 2, 6, 3, (7, 6)
    xp = np.arange(float(n * c * size[0] * size[1])).reshape(n, c, *size)
    kernel, stride, dilation = (2, 3), (2, 1), (3, 1)
    out = tuple(win.out_size(s, 0, 0, r, st, d) for s, r, st, d in zip(size, kernel, stride, dilation))
    v = (
        win.windows(xp, groups, kernel, stride, dilation, out, writeable)
        if writeable
        else win.windows(xp, groups, kernel, stride, dilation, out)
    )
    assert v.shape == (n, groups, c // groups, *out, *kernel)
    assert v.flags.writeable == writeable
    for b, g, ch, o0, o1, r0, r1 in itertools.product(*map(range, v.shape)):
        want = xp[b, g * (c // groups) + ch, o0 * stride[0] + r0 * dilation[0], o1 * stride[1] + r1 * dilation[1]]
        assert v[b, g, ch, o0, o1, r0, r1] == want


def chunks(n: int, out: list[int], row: int, target: int) -> list[tuple[tuple[int, int], tuple[int, int] | None]]:
    result = []
    for batch, rows in win.row_chunks(n, out, row, target):
        result.append(((batch.start, batch.stop), None if rows == slice(None) else (rows.start, rows.stop)))
    return result


def test_row_chunks_hand_worked() -> None:
    # a sample is 2 * 3 positions of 1 byte: samples fit, as many as the target holds
    assert chunks(5, [2, 3], 1, 12) == [((0, 2), None), ((2, 4), None), ((4, 5), None)]
    assert chunks(3, [2, 3], 1, 6) == [((0, 1), None), ((1, 2), None), ((2, 3), None)]  # exactly one sample
    # a sample is over the target: runs of whole out[0] rows (3 positions of 2 bytes each)
    assert chunks(2, [4, 3], 2, 13) == [((0, 1), (0, 2)), ((0, 1), (2, 4)), ((1, 2), (0, 2)), ((1, 2), (2, 4))]
    assert chunks(1, [3, 3], 2, 5) == [((0, 1), (0, 1)), ((0, 1), (1, 2)), ((0, 1), (2, 3))]  # a row over it
    assert chunks(2, [3], 4, 1) == [((0, 1), (0, 1)), ((0, 1), (1, 2)), ((0, 1), (2, 3)), ((1, 2), (0, 1)),
                                    ((1, 2), (1, 2)), ((1, 2), (2, 3))]  # fmt: skip
    # one position of one byte: a sample (and a line) of exactly 1 byte
    assert chunks(4, [1], 1, 2) == [((0, 2), None), ((2, 4), None)]
    assert chunks(1, [5], 1, 2) == [((0, 1), (0, 2)), ((0, 1), (2, 4)), ((0, 1), (4, 5))]


def test_merge_axes_gives_the_elements_in_order() -> None:
    a = np.arange(24.0).reshape(2, 3, 4)
    np.testing.assert_array_equal(win.merge_axes(a, 1, 3), a.reshape(2, 12))
    np.testing.assert_array_equal(win.merge_axes(a, 0, 2), a.reshape(6, 4))
    strided = a[:, :, ::2]
    np.testing.assert_array_equal(win.merge_axes(strided, 1, 3), strided.reshape(2, 6))
    ones = a[:, :1, :1]
    np.testing.assert_array_equal(win.merge_axes(ones, 1, 3), ones.reshape(2, 1))
    assert not win.merge_axes(a, 1, 3).flags.writeable  # a view the callers only read: never written through


@pytest.mark.parametrize("last", [False, True])
def test_weight_matrix_layout(last: bool) -> None:
    k, cg, taps, groups = 4, 2, 3, 2
    w = np.arange(float(k * cg * taps)).reshape(k, cg, taps)[..., ::-1]  # not contiguous
    m = win.weight_matrix(w, groups, last)
    assert m.flags.c_contiguous
    kg = k // groups
    assert m.shape == ((groups, taps * cg, kg) if last else (groups, kg, cg * taps))
    for g, kk, c, t in itertools.product(range(groups), range(kg), range(cg), range(taps)):
        want = w[g * kg + kk, c, t]
        assert (m[g, t * cg + c, kk] if last else m[g, kk, c * taps + t]) == want


@pytest.mark.parametrize("last", [False, True])
def test_columns_put_each_window_element_in_its_row_or_column(last: bool) -> None:
    n, groups, cg, out, kernel = 2, 2, 3, (2, 3), (2, 2)
    view = np.arange(float(n * groups * cg * 6 * 4)).reshape(n, groups, cg, *out, *kernel)[..., ::-1, :]
    scratch = np.full(view.size + 5, np.nan)
    m = win.columns(view, last, scratch)
    positions, contraction = n * 6, cg * 4
    assert m.shape == ((groups, positions, contraction) if last else (groups, contraction, positions))
    assert np.shares_memory(m, scratch)
    for b, g, c, o0, o1, r0, r1 in itertools.product(*map(range, view.shape)):
        p, t = (b * out[0] + o0) * out[1] + o1, r0 * kernel[1] + r1
        got = m[g, p, t * cg + c] if last else m[g, c * 4 + t, p]
        assert got == view[b, g, c, o0, o1, r0, r1]
