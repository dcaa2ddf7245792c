"""The emulator's load_advanced_indexing / store_advanced_indexing against cuTile 1.7's documentation.

``ct.load_advanced_indexing(array, indices, padding_mode=...)``: ``indices``
holds one 1-D integer tile (the sparse dim: each value picks one slice of
the array along it) and a ``ct.Slice(start, length)`` (a runtime start, a
power-of-two length) for every other dim; element (i, j) of the tile is
array[idx[i], start + j]. Elements outside the array on a sparse or a dense
dim read the padding mode's value; a tile wholly outside is undefined.
``store_advanced_indexing`` takes the same indices and a tile of exactly
their shape; cuTile's own tests show a dense dim's overhang dropped and call
a repeated sparse index undefined. The first two tests are the stubs'
documented examples.
"""

from __future__ import annotations

import numpy as np
import pytest

from sigdnn.plan_builders.cutile import emulator as ct


def test_the_documented_load_example() -> None:
    x = np.arange(64, dtype=np.int32).reshape(8, 8)
    tile = ct.load_advanced_indexing(x, (ct.arange(4), ct.Slice(2, 4)), padding_mode=ct.PaddingMode.ZERO)
    np.testing.assert_array_equal(tile, [[2, 3, 4, 5], [10, 11, 12, 13], [18, 19, 20, 21], [26, 27, 28, 29]])
    assert tile.dtype == x.dtype


def test_the_documented_store_example() -> None:
    y = np.zeros((6, 4), dtype=np.int32)
    ct.store_advanced_indexing(y, (ct.arange(4) + 1, ct.Slice(0, 4)), ct.full((4, 4), 1, dtype=y.dtype))
    np.testing.assert_array_equal(y, [[0] * 4, [1] * 4, [1] * 4, [1] * 4, [1] * 4, [0] * 4])


def test_rows_are_picked_in_the_index_order_and_may_repeat_on_a_load() -> None:
    x = np.arange(32, dtype=np.int32).reshape(8, 4)
    np.testing.assert_array_equal(ct.load_advanced_indexing(x, (np.array([7, 4, 2, 2], np.int32), ct.Slice(0, 4))),
                                  x[[7, 4, 2, 2]])  # fmt: skip


def test_the_sparse_dim_may_be_any_dim() -> None:
    x = np.arange(2 * 8 * 4, dtype=np.float32).reshape(2, 8, 4)
    tile = ct.load_advanced_indexing(x, (ct.Slice(1, 1), np.array([5, 0], np.int32), ct.Slice(0, 4)))
    np.testing.assert_array_equal(tile, x[1:2, [5, 0], :])


@pytest.mark.parametrize(
    ("shape", "rows", "start", "want"),
    [
        ((4, 8), [0, 1, 2, 3], 6, lambda x: np.pad(x[:, 6:], ((0, 0), (0, 2)))),  # a dense dim's overhang
        ((8, 4), [6, 7, 8, 9], 0, lambda x: np.pad(x[6:8], ((0, 2), (0, 0)))),  # sparse indices past the end
        ((8, 4), [-1, 0, 1, 2], 0, lambda x: np.pad(x[0:3], ((1, 0), (0, 0)))),  # a negative index is outside too
        ((4, 8), [0, 1, 2, 3], -2, lambda x: np.pad(x[:, :2], ((0, 0), (2, 0)))),  # a slice from before the array
    ],
)
def test_elements_outside_the_array_read_the_padding(shape: tuple, rows: list[int], start: int, want) -> None:  # type: ignore[no-untyped-def]
    x = np.arange(32, dtype=np.int32).reshape(shape) + 1
    tile = ct.load_advanced_indexing(
        x, (np.array(rows, np.int32), ct.Slice(start, 4)), padding_mode=ct.PaddingMode.ZERO
    )
    np.testing.assert_array_equal(tile, want(x))


def test_the_padding_mode_names_the_value_and_undetermined_reads_a_poison() -> None:
    x = np.ones((2, 4), dtype=np.float32)
    index = (np.array([0, 5], np.int32), ct.Slice(2, 4))
    tile = ct.load_advanced_indexing(x, index, padding_mode=ct.PaddingMode.NEG_INF)
    np.testing.assert_array_equal(tile, [[1, 1, -np.inf, -np.inf], [-np.inf] * 4])
    assert np.isnan(ct.load_advanced_indexing(x, index)[1]).all()


def test_a_store_drops_a_dense_dims_overhang() -> None:
    """cuTile's test_store_dense_oob_ignored: columns 2 ... 5 of a 4-column array, on the even rows."""
    y = np.zeros((8, 4), dtype=np.int32)
    ct.store_advanced_indexing(y, (ct.arange(4) * 2, ct.Slice(2, 4)), ct.full((4, 4), 99, dtype=y.dtype))
    want = np.zeros((8, 4), dtype=np.int32)
    want[::2, 2:] = 99
    np.testing.assert_array_equal(y, want)


def test_a_store_converts_to_the_arrays_dtype_but_refuses_an_implicit_narrowing() -> None:
    y = np.zeros((2, 4), dtype=ct.bfloat16)
    tile = np.full((2, 4), 1.5, dtype=np.float32)
    with pytest.raises(TypeError, match="cannot implicitly cast float32 to bfloat16"):
        ct.store_advanced_indexing(y, (ct.arange(2), ct.Slice(0, 4)), tile)
    ct.store_advanced_indexing(y, (ct.arange(2), ct.Slice(0, 4)), ct.astype(tile, ct.bfloat16))
    assert (y.astype(np.float32) == 1.5).all()


@pytest.mark.parametrize(
    ("rows", "message"),
    [([0, 1, 2, 8], r"sparse indices \[8\] outside 8: a store there is not documented"),
     ([0, -1, 2, 3], r"sparse indices \[-1\] outside 8"),
     ([0, 0, 4, 6], "repeated on a store")],
)  # fmt: skip
def test_a_store_refuses_sparse_indices_outside_or_repeated(rows: list[int], message: str) -> None:
    y = np.zeros((8, 4), dtype=np.int32)
    with pytest.raises(IndexError, match=message):
        ct.store_advanced_indexing(y, (np.array(rows, np.int32), ct.Slice(0, 4)), ct.full((4, 4), 1, dtype=y.dtype))
    assert not y.any()


@pytest.mark.parametrize(
    "index",
    [(np.array([8, 9], np.int32), ct.Slice(0, 4)), (np.array([0, 1], np.int32), ct.Slice(4, 4)),
     (np.array([-2, -1], np.int32), ct.Slice(0, 4)), (np.array([0, 1], np.int32), ct.Slice(-4, 4))],
)  # fmt: skip
def test_a_tile_wholly_outside_the_array_is_refused(index: tuple) -> None:
    """Undefined in cuTile, on a load and a store alike."""
    x = np.zeros((8, 4), dtype=np.float32)
    with pytest.raises(IndexError, match="wholly outside"):
        ct.load_advanced_indexing(x, index, padding_mode=ct.PaddingMode.ZERO)
    with pytest.raises(IndexError, match="wholly outside"):
        ct.store_advanced_indexing(x, index, np.zeros((2, 4), np.float32))


@pytest.mark.parametrize(
    ("array", "index", "message"),
    [
        (np.zeros(8), (np.arange(4),), "rank 2 or more"),
        (np.zeros((8, 8)), (np.arange(4),), "takes 2 indices"),
        (np.zeros((8, 8)), [np.arange(4), ct.Slice(0, 4)], "takes 2 indices"),
        (np.zeros((8, 8)), (ct.Slice(0, 4), ct.Slice(0, 4)), "exactly one 1-D integer tile .* got 0"),
        (np.zeros((8, 8)), (np.arange(4), np.arange(4)), "exactly one 1-D integer tile .* got 2"),
        (np.zeros((8, 8)), (np.zeros((2, 2), np.int32), ct.Slice(0, 4)), "1-D integer tile, got shape"),
        (np.zeros((8, 8)), (np.zeros(4, np.float32), ct.Slice(0, 4)), "1-D integer tile, got shape"),
        (np.zeros((8, 8)), (np.arange(3), ct.Slice(0, 4)), "power of two"),
        (np.zeros((8, 8)), (np.arange(4), ct.Slice(0, 3)), "power of two"),
    ],
)
def test_indices_cutile_refuses_are_refused(array: np.ndarray, index, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match=message):
        ct.load_advanced_indexing(array, index)


def test_a_store_takes_a_tile_of_exactly_the_indices_shape() -> None:
    y = np.zeros((8, 4), dtype=np.float32)
    with pytest.raises(ValueError, match=r"a tile of \(4, 2\) does not match the indices' shape \(4, 4\)"):
        ct.store_advanced_indexing(y, (ct.arange(4), ct.Slice(0, 4)), np.zeros((4, 2), np.float32))
    with pytest.raises(ValueError, match="does not match"):
        ct.store_advanced_indexing(y, (ct.arange(4), ct.Slice(0, 4)), np.float32(1.0))
