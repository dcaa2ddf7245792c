"""The emulator against cuTile's documented contracts: ``extract`` (the tile cut into a grid of ``shape``
subtiles, ``index`` naming one subtile, not an element), ``cat`` (a pair of one shape), ``cumsum`` (a scan in the
tile's dtype), power-of-two tile extents, and launch arguments (arrays and numbers, never None). A kernel text the
GPU would refuse fails on the CPU too."""

from __future__ import annotations

import numpy as np
import pytest

from sigdnn.plan_builders.cutile import emulator as ct


def test_extract_takes_the_subtile_at_a_grid_index() -> None:
    tile = np.arange(8, dtype=np.int32)
    np.testing.assert_array_equal(ct.extract(tile, (0,), (4,)), [0, 1, 2, 3])
    np.testing.assert_array_equal(ct.extract(tile, (1,), (4,)), [4, 5, 6, 7])
    square = np.arange(16, dtype=np.int32).reshape(4, 4)
    np.testing.assert_array_equal(ct.extract(square, (0, 1), (2, 2)), [[2, 3], [6, 7]])
    np.testing.assert_array_equal(ct.extract(square, (1, 0), (2, 2)), [[8, 9], [12, 13]])


def test_extract_of_a_column_and_a_row_is_a_rank_one_factor() -> None:
    x = np.arange(12.0).reshape(3, 4)
    column, row = ct.extract(x, (0, 2), (3, 1)), ct.extract(x, (1, 0), (1, 4))
    np.testing.assert_array_equal(column, [[2.0], [6.0], [10.0]])
    np.testing.assert_array_equal(row, [[4.0, 5.0, 6.0, 7.0]])
    column[0, 0] = -1.0  # a copy: the tile is unchanged
    assert x[0, 2] == 2.0


@pytest.mark.parametrize(
    ("tile", "index", "shape"),
    [((8,), (2,), (4,)), ((8,), (-1,), (4,)), ((8,), (0,), (3,)), ((8,), (0, 0), (4,)), ((4, 4), (0, 2), (2, 2))],
)
def test_extract_refuses_a_subtile_outside_or_a_shape_that_does_not_divide(tile, index, shape) -> None:
    with pytest.raises(ValueError, match="extract: no subtile"):
        ct.extract(np.zeros(tile), index, shape)


def test_cat_joins_a_pair_of_one_shape_along_an_axis() -> None:
    a, b = np.arange(4.0).reshape(2, 2), np.arange(4.0, 8.0).reshape(2, 2)
    np.testing.assert_array_equal(ct.cat((a, b), 0), [[0, 1], [2, 3], [4, 5], [6, 7]])
    np.testing.assert_array_equal(ct.cat((a, b), 1), [[0, 1, 4, 5], [2, 3, 6, 7]])
    for pair in ((a, b[:1]), (a, b.astype(np.float32)), (a, b, a)):
        with pytest.raises(ValueError, match="cat: a pair of one shape"):
            ct.cat(pair, 0)


def test_cumsum_runs_along_an_axis_in_the_tiles_dtype() -> None:
    """cuTile's documented examples (forward and reverse along axis 1), along axis 0 (the default), and float32
    sums kept in float32."""
    tile = np.arange(8, dtype=np.int32).reshape(2, 4)
    np.testing.assert_array_equal(ct.cumsum(tile, 1), [[0, 1, 3, 6], [4, 9, 15, 22]])
    np.testing.assert_array_equal(ct.cumsum(tile, 1, reverse=True), [[6, 6, 5, 3], [22, 18, 13, 7]])
    np.testing.assert_array_equal(ct.cumsum(tile), [[0, 1, 2, 3], [4, 6, 8, 10]])  # axis 0 by default
    np.testing.assert_array_equal(ct.cumsum(tile, axis=0, reverse=True), [[4, 6, 8, 10], [4, 5, 6, 7]])
    summed = ct.cumsum(np.array([[1.0], [2.0**-24], [2.0**-24]], np.float32), axis=0)
    assert summed.dtype == np.float32 and summed[2, 0] == 1.0  # each 1 + 2^-24 rounds to 1 in float32


@pytest.mark.parametrize("make", [lambda: ct.full((3, 4), 0.0, np.float32), lambda: ct.arange(6, dtype=np.int32),
                                  lambda: ct.load(np.zeros((8, 8)), (0, 0), (4, 3))], ids=["full", "arange", "load"])  # fmt: skip
def test_tile_shapes_must_be_powers_of_two(make) -> None:
    """cuTile assumes every tile extent is a power of two and its compiler refuses others; so does the emulator,
    so a kernel text that would not compile fails on the CPU too."""
    with pytest.raises(ValueError, match="power of two"):
        make()


def test_a_launch_refuses_a_none_argument_as_cutile_does() -> None:
    """Even an argument the kernel never reads (a dense gather's index) must be an array or a number."""
    kernel = ct.kernel(lambda x, unused: None)
    ct.launch(None, (1, 1, 1), kernel, (np.zeros(4), np.zeros(1)))
    with pytest.raises(TypeError, match=r"launch arguments \[1\] are None"):
        ct.launch(None, (1, 1, 1), kernel, (np.zeros(4), None))


def test_a_launch_fills_a_short_grid_with_ones_and_forgets_it_afterwards() -> None:
    """A 1-D grid runs its blocks with y = z = 0; once the launch is over, num_blocks is the default grid's again."""
    seen = []
    kernel = ct.kernel(lambda out: seen.append((ct.bid(0), ct.bid(1), ct.bid(2), ct.num_blocks(1), ct.num_blocks(2))))
    ct.launch(None, (3,), kernel, (np.zeros(1),))
    assert seen == [(0, 0, 0, 1, 1), (1, 0, 0, 1, 1), (2, 0, 0, 1, 1)]
    ct.launch(None, (1, 2, 2), kernel, (np.zeros(1),))
    assert ct.num_blocks(0) == ct.num_blocks(1) == ct.num_blocks(2) == 1


def test_reversed_blocks_run_every_block_once_last_to_first_and_only_inside() -> None:
    """Both orders are valid schedules of independent blocks: the reversed one visits the same blocks, z then y
    then x from the highest, and the default order comes back when the context ends."""
    seen = []
    kernel = ct.kernel(lambda out: seen.append((ct.bid(0), ct.bid(1), ct.bid(2))))
    forward = [(x, y, z) for z in range(2) for y in range(3) for x in range(2)]
    with ct.reversed_blocks():
        ct.launch(None, (2, 3, 2), kernel, (np.zeros(1),))
    assert seen == forward[::-1]
    seen.clear()
    ct.launch(None, (2, 3, 2), kernel, (np.zeros(1),))
    assert seen == forward
    assert (ct.bid(0), ct.bid(1), ct.bid(2)) == (0, 0, 0)  # outside a launch, the default block again
