"""The emulator's gather and scatter against cuTile's documented semantics, element by element.

cuda.tile.gather(array, indices, mask=None, padding_value=0): ``indices`` is
one integer tile (or scalar) per array dim, broadcast to a common shape (a
bare tile for a 1-D array); an index outside the array, or a false mask,
reads ``padding_value``. scatter stores where the indices fall inside (and
the mask holds) and drops the rest. load_advanced_indexing(array, indices,
padding_mode=...): one 1-D index tile (the sparse dim) and a Slice(start,
length) for every other dim.
"""

from __future__ import annotations

import numpy as np
import pytest

from sigdnn.plan_builders.cutile import emulator as ct


def test_gather_broadcasts_one_index_tile_per_dim_and_pads_outside() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    rows = np.array([[-1], [0], [2], [3]])  # (4, 1)
    cols = np.array([[0, 3, 4]])  # (1, 3)
    got = ct.gather(a, (rows, cols), padding_value=-7.0)
    want = [[-7, -7, -7], [0, 3, -7], [8, 11, -7], [-7, -7, -7]]
    np.testing.assert_array_equal(got, want)
    assert got.dtype == a.dtype and got.shape == (4, 3)


def test_gather_takes_scalars_among_the_tiles_and_a_mask() -> None:
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    k = np.arange(4)
    got = ct.gather(a, (1, 2, k), mask=k % 2 == 0)
    np.testing.assert_array_equal(got, [20, 0, 22, 0])
    np.testing.assert_array_equal(ct.gather(a[0, 0], k - 1), [0, 0, 1, 2])  # 1-D: a bare tile


def test_scatter_stores_inside_and_drops_what_falls_outside_or_is_masked() -> None:
    a = np.zeros((2, 3), dtype=np.float16)
    rows, cols = np.array([0, 1, 2, 1]), np.array([0, 2, 0, -1])
    ct.scatter(a, (rows, cols), np.array([1.5, 2.5, 3.5, 4.5], np.float16))
    np.testing.assert_array_equal(a, [[1.5, 0, 0], [0, 0, 2.5]])
    ct.scatter(a, (0, np.arange(3)), 9.0, mask=np.array([False, True, False]))
    np.testing.assert_array_equal(a, [[1.5, 9, 0], [0, 0, 2.5]])


@pytest.mark.parametrize("store", ["scatter", "store"])
def test_a_float32_tile_into_a_16_bit_array_needs_astype(store: str) -> None:
    """cuTile refuses the implicit narrowing (the GPU's compile error that a delta-rule kernel once hit)."""
    a = np.zeros(4, dtype=np.float16)
    tile = np.arange(4, dtype=np.float32)
    write = (lambda v: ct.scatter(a, np.arange(4), v)) if store == "scatter" else (lambda v: ct.store(a, (0,), v))
    with pytest.raises(TypeError, match="cannot implicitly cast float32 to float16"):
        write(tile)
    write(ct.astype(tile, np.float16))
    np.testing.assert_array_equal(a, [0, 1, 2, 3])


def test_launch_passes_python_floats_as_float32_and_ints_as_int32() -> None:
    """As cuTile's launch does (a float64 constant must arrive some other way); a ct.Constant keeps its value."""
    seen = {}

    def body(x, n, k: ct.Constant[int]) -> None:
        seen.update(x=x, n=n, k=k)

    ct.launch(None, (1,), ct.kernel(body), (0.1, 3, 2**40))
    assert seen["x"].dtype == np.float32 and seen["x"] == np.float32(0.1)
    assert seen["n"].dtype == np.int32 and seen["k"] == 2**40
    with pytest.raises(OverflowError, match="int32"):
        ct.launch(None, (1,), ct.kernel(body), (0.1, 2**31, 0))


def test_an_index_tuple_of_the_wrong_length_is_refused() -> None:
    with pytest.raises(ValueError, match="2 index tiles for an array of rank 3"):
        ct.gather(np.zeros((2, 2, 2)), (np.arange(2), np.arange(2)))


def test_load_advanced_indexing_takes_one_index_tile_and_slices_elsewhere() -> None:
    """cuda.tile.load_advanced_indexing's documented example (rows 0-3 of an 8 x 8 arange, columns 2-5), then
    the sparse dim second, and rows and columns past the array read the padding mode."""
    a = np.arange(64, dtype=np.int32).reshape(8, 8)
    got = ct.load_advanced_indexing(a, (np.arange(4), ct.Slice(2, 4)), padding_mode=ct.PaddingMode.ZERO)
    np.testing.assert_array_equal(got, [[2, 3, 4, 5], [10, 11, 12, 13], [18, 19, 20, 21], [26, 27, 28, 29]])
    got = ct.load_advanced_indexing(a, (ct.Slice(6, 4), np.array([7, 0])), padding_mode=ct.PaddingMode.ZERO)
    np.testing.assert_array_equal(got, [[55, 48], [63, 56], [0, 0], [0, 0]])
    b = np.arange(6, dtype=np.float32).reshape(2, 3)
    got = ct.load_advanced_indexing(b, (np.array([1, -1, 2, 0]), ct.Slice(1, 4)), padding_mode=ct.PaddingMode.NEG_INF)
    np.testing.assert_array_equal(
        got, [[4, 5, -np.inf, -np.inf], [-np.inf] * 4, [-np.inf] * 4, [1, 2, -np.inf, -np.inf]]
    )


def test_load_advanced_indexing_refuses_what_cutile_leaves_undefined_or_rejects() -> None:
    a = np.zeros((4, 4), np.float32)
    with pytest.raises(IndexError, match="entirely outside"):  # cuTile: undefined
        ct.load_advanced_indexing(a, (np.array([4, 5]), ct.Slice(0, 2)))
    with pytest.raises(ValueError, match="exactly one"):
        ct.load_advanced_indexing(a, (ct.Slice(0, 2), ct.Slice(0, 2)))
    with pytest.raises(ValueError, match="exactly one"):
        ct.load_advanced_indexing(a, (np.array([0]), np.array([1])))
    with pytest.raises(ValueError, match="1-D index tile"):  # the index tile must be 1-D
        ct.load_advanced_indexing(a, (np.zeros((2, 1), np.int32), ct.Slice(0, 2)))
    with pytest.raises(ValueError, match="power of two"):
        ct.Slice(0, 3)
    with pytest.raises(ValueError, match="rank"):
        ct.load_advanced_indexing(a, (np.array([0]),))
