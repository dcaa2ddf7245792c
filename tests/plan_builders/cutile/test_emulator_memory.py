"""The emulator's tiled loads and stores and its dtype conversions against cuTile's documented behaviour.

The emulated kernel tests exercise these on every launch, but only through kernels that are correct; here each
rule is checked on its own: what a load reads past the array in each padding mode, that an unchecked access past
the array is refused (on the GPU it would touch another allocation), rank mismatches, the narrowing stores cuTile
refuses without an ``astype``, and how float-to-integer and fp8 conversions saturate.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from sigdnn.plan_builders.cutile import emulator as ct


def _square() -> np.ndarray:
    return np.arange(12, dtype=np.float32).reshape(3, 4)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("ZERO", 0.0), ("NEG_ZERO", -0.0), ("NAN", np.nan), ("POS_INF", np.inf), ("NEG_INF", -np.inf)],
)
def test_a_load_past_the_array_reads_its_padding_mode(mode: str, expected: float) -> None:
    tile = ct.load(_square(), (1, 1), (2, 2), padding_mode=getattr(ct.PaddingMode, mode))
    np.testing.assert_array_equal(tile[0], [10.0, 11.0])  # row 2 inside, row 3 past the end
    np.testing.assert_array_equal(tile[1], [expected, expected])
    assert np.signbit(tile[1, 0]) == np.signbit(expected)


def test_a_rank_two_load_without_padding_reads_a_poison_and_a_rank_one_load_zeros() -> None:
    poison = ct.load(_square(), (1, 1), (2, 2))
    assert np.isnan(poison[1]).all()
    integers = ct.load(np.arange(12, dtype=np.int32).reshape(3, 4), (1, 1), (2, 2))
    np.testing.assert_array_equal(integers[1], [0, 0])  # an integer poison: 0
    np.testing.assert_array_equal(ct.load(np.arange(3.0), (0,), (4,)), [0.0, 1.0, 2.0, 0.0])
    nan_tail = ct.load(np.arange(3.0), (0,), (4,), padding_mode=ct.PaddingMode.NAN)
    assert np.isnan(nan_tail[3])


def test_an_unchecked_access_past_the_array_is_refused_on_every_axis() -> None:
    ct.load(np.arange(8.0), (1,), (4,), check_bounds=False)  # exactly to the end: fine
    with pytest.raises(IndexError, match="unchecked tile"):
        ct.load(np.arange(7.0), (1,), (4,), check_bounds=False)
    ct.load(_square().reshape(2, 6)[:, :4], (0, 1), (2, 2), check_bounds=False)
    with pytest.raises(IndexError, match="unchecked tile"):
        ct.load(_square(), (0, 1), (2, 4), check_bounds=False)  # past the columns only
    with pytest.raises(IndexError, match="unchecked tile"):
        ct.load(_square(), (1, 0), (2, 2), check_bounds=False)  # past the rows only
    ct.store(np.zeros(8), (1,), np.ones(4), check_bounds=False)
    ct.store(np.zeros((2, 4)), (0, 1), np.ones((2, 2)), check_bounds=False)  # exactly to the end of both axes
    with pytest.raises(IndexError, match="unchecked tile"):
        ct.store(np.zeros(7), (1,), np.ones(4), check_bounds=False)
    with pytest.raises(IndexError, match="unchecked tile"):
        ct.store(np.zeros((4, 3)), (0, 1), np.ones((2, 2)), check_bounds=False)  # past the columns only
    with pytest.raises(IndexError, match="unchecked tile"):
        ct.store(np.zeros((3, 4)), (1, 0), np.ones((2, 2)), check_bounds=False)  # past the rows only


def test_a_checked_access_past_the_array_pads_loads_and_drops_stores() -> None:
    array = np.zeros((3, 4), np.float32)
    ct.store(array, (1, 1), np.full((2, 2), 5.0, np.float32))
    expected = np.zeros((3, 4), np.float32)
    expected[2, 2:4] = 5.0
    np.testing.assert_array_equal(array, expected)
    vector = np.zeros(6, np.int32)
    ct.store(vector, (1,), np.arange(1, 5, dtype=np.int32))
    np.testing.assert_array_equal(vector, [0, 0, 0, 0, 1, 2])


def test_a_scalar_store_fills_a_tile_of_one() -> None:
    array = np.zeros((2, 3), np.float32)
    ct.store(array, (1, 2), np.float32(7.0))
    assert array[1, 2] == 7.0 and array.sum() == 7.0


@pytest.mark.parametrize(("index", "shape"), [((0,), (2, 2)), ((0, 0), (2,)), ((0, 0, 0), (2, 2, 2))])
def test_a_load_whose_index_or_shape_is_not_the_arrays_rank_is_refused(index: tuple, shape: tuple) -> None:
    with pytest.raises(ValueError, match="do not match an array of rank 2"):
        ct.load(_square(), index, shape)


@pytest.mark.parametrize(("index", "tile"), [((0,), np.ones((2, 2))), ((0, 0), np.ones(2))])
def test_a_store_whose_index_or_tile_is_not_the_arrays_rank_is_refused(index: tuple, tile: np.ndarray) -> None:
    with pytest.raises(ValueError, match="do not match an array of rank 2"):
        ct.store(np.zeros((4, 4)), index, tile)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2])
def test_a_float32_tile_into_a_narrow_float_array_needs_an_astype(dtype: type) -> None:
    with pytest.raises(TypeError, match="cannot implicitly cast float32"):
        ct.store(np.zeros(4, dtype), (0,), np.ones(4, np.float32))
    with pytest.raises(TypeError, match="cannot implicitly cast float32"):
        ct.scatter(np.zeros(4, dtype), np.arange(4), np.ones(4, np.float32))
    ct.store(np.zeros(4, dtype), (0,), ct.astype(np.ones(4, np.float32), np.dtype(dtype)))


@pytest.mark.parametrize("dtype", [np.float32, np.int8, np.uint8, np.int16, np.int32])
def test_wider_floats_and_integer_arrays_take_a_float_tile(dtype: type) -> None:
    """float64 into float32 is the emulator's own widening (cuTile's would be float32); integers convert."""
    array = np.zeros(4, dtype)
    ct.store(array, (0,), np.array([1.9, 2.0, 3.0, 4.0]))
    expected = [1, 2, 3, 4] if array.dtype.kind in "iu" else np.float32([1.9, 2.0, 3.0, 4.0])  # ints truncate
    np.testing.assert_array_equal(array, expected)


def test_float_to_integer_truncates_and_saturates_at_32_bits() -> None:
    floats = np.array([2.7, -2.7, 3e9, -3e9, np.nan, 5e9])
    np.testing.assert_array_equal(ct.astype(floats, ct.int32), [2, -2, 2**31 - 1, -(2**31), 0, 2**31 - 1])
    np.testing.assert_array_equal(ct.astype(floats, ct.uint32), [2, 0, 3_000_000_000, 0, 0, 2**32 - 1])
    np.testing.assert_array_equal(ct.astype(np.array([300.0, -1.0]), ct.uint8), [44, 255])  # the low bits


def test_float_to_int64_saturates_at_its_extremes() -> None:
    big = np.array([1e19, -1e19, 2.0**63, 9.2e18])
    np.testing.assert_array_equal(ct.astype(big, ct.int64), [2**63 - 1, -(2**63), 2**63 - 1, 9_200_000_000_000_000_000])


def test_conversions_to_bool_and_fp8() -> None:
    np.testing.assert_array_equal(ct.astype(np.array([0.0, -0.0, 2.0, np.nan]), ct.bool_), [False, False, True, True])
    e4m3 = ct.astype(np.array([1e6, -np.inf, 448.0, 300.0]), np.dtype(ml_dtypes.float8_e4m3fn))
    np.testing.assert_array_equal(e4m3.astype(np.float32), [448.0, -448.0, 448.0, 288.0])
    e5m2 = ct.astype(np.array([1e9, np.inf]), np.dtype(ml_dtypes.float8_e5m2))
    np.testing.assert_array_equal(e5m2.astype(np.float32), [57344.0, 57344.0])


def test_bfloat16_rounds_once_from_float32() -> None:
    """float64 -> float32 -> bfloat16 as cuTile's float32 intermediates do (not float64 -> bfloat16 directly)."""
    x = np.array([1.0 + 2.0**-8 + 2.0**-30])  # float32 rounds it to the tie 1 + 2^-8, which bfloat16 rounds to even
    assert float(ct.astype(x, ct.bfloat16).astype(np.float32)[0]) == 1.0
    assert float(x.astype(ml_dtypes.bfloat16).astype(np.float32)[0]) == 1.0 + 2.0**-7  # the direct rounding differs


def test_tf32_rounds_to_ten_mantissa_bits_and_keeps_infinities_and_nan() -> None:
    x = np.array([1.0 + 2.0**-11, 1.0 + 2.0**-12, 1.0 + 3 * 2.0**-12, np.inf, -np.inf, np.nan], np.float32)
    out = ct.astype(x, ct.tfloat32)
    np.testing.assert_array_equal(out[:5], [1.0 + 2.0**-10, 1.0, 1.0 + 2.0**-10, np.inf, -np.inf])
    assert np.isnan(out[5]) and out.dtype == np.float32


def test_tf32_rounds_the_last_bits_to_nearest_and_leaves_every_nan_a_nan() -> None:
    below_tie = np.float32(1.0 + 2.0**-11 - 2.0**-23)  # the 13 dropped bits 0x0FFF: just below the tie, down
    lowest = np.float32(1.0 + 2.0**-23)  # only the last bit set
    out = ct.astype(np.array([below_tie, lowest], np.float32), ct.tfloat32)
    np.testing.assert_array_equal(out, [1.0, 1.0])
    # NaN payloads that the rounding's carry would turn into inf or -0
    nans = np.array([0x7F800001, 0x7FFFFFFF, 0xFFFFFFFF], np.uint32).view(np.float32)
    assert np.isnan(ct.astype(nans, ct.tfloat32)).all()


def test_a_kernels_arrays_answer_slice_with_views_of_the_same_memory() -> None:
    """cuTile's Array.slice(axis, start, stop): a view along one axis (negative axes count from the last), whose
    loads read and stores write the launched array; the kernel sees every array argument as one."""
    seen = []

    @ct.kernel
    def kernel(a, start):
        part = a.slice(1, start, start + 2)
        seen.append(part.shape)
        ct.store(part, (0, 0), ct.load(part, (0, 0), (2, 2)) * 10)
        seen.append(a.slice(-1, 0, 1).shape)

    a = np.arange(12, dtype=np.float32).reshape(2, 6)
    ct.launch(None, (1,), kernel, (a, 3))
    assert seen == [(2, 2), (2, 1)]
    np.testing.assert_array_equal(a, [[0, 1, 2, 30, 40, 5], [6, 7, 8, 90, 100, 11]])


@pytest.mark.parametrize(("start", "stop"), [(-1, 2), (6, 6), (2, 1), (0, 7)])
def test_a_slice_outside_the_axis_is_refused(start: int, stop: int) -> None:
    """0 <= start < N and start <= stop <= N, as cuTile requires (outside them a GPU's result is undefined)."""
    array = np.zeros((2, 6), np.float32).view(ct.TileArray)
    with pytest.raises(IndexError, match="needs 0 <= start < N"):
        array.slice(1, start, stop)
    assert array.slice(1, 5, 6).shape == (2, 1) and array.slice(0, 0, 0).shape == (0, 6)


def test_launch_arguments_arrive_as_the_gpu_passes_them() -> None:
    """Ints as int32 (the extremes included; wider ones refused as cuTile refuses them), floats as float32,
    arrays as TileArray views, anything else as given."""
    seen = []

    @ct.kernel
    def kernel(a, n, x, other):
        seen.append((type(a), n, type(n), type(x), other))

    marker = object()
    for n in (2**31 - 1, -(2**31)):
        ct.launch(None, (1,), kernel, (np.zeros(2), n, 0.5, marker))
    assert seen == [(ct.TileArray, n, np.int32, np.float32, marker) for n in (2**31 - 1, -(2**31))]
    for n in (2**31, -(2**31) - 1):
        with pytest.raises(OverflowError, match="int32"):
            ct.launch(None, (1,), kernel, (np.zeros(2), n, 0.5, marker))
