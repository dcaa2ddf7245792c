"""The GPU reference's one rounding (tiles.scatter) against sigdnn.dtypes.round_to, bit for bit, in the emulator.

The edge values are hand-picked where a rounding goes wrong: ties of every
narrow format (a double rounding through float32 would break them), values
just past a tie, overflow thresholds (fp8 e4m3's 464 -> NaN, e5m2's 61440 ->
inf, float32's max), subnormals of each format, signed zeros, inf and NaN;
then random bit patterns of float64. Integer targets: truncation,
saturation and NaN -> 0.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from sigdnn.dtypes import DataType, round_to
from sigdnn.plan_builders.cutile.backend import EmulatedGpu
from sigdnn.plan_builders.gpu_reference.arrays import Array
from sigdnn.plan_builders.gpu_reference.backend import Gpu
from sigdnn.plan_builders.gpu_reference.tensors import read, write

FLOATS = [DataType.FLOAT32, DataType.FLOAT16, DataType.BFLOAT16, DataType.FP8_E4M3, DataType.FP8_E5M2]
INTEGERS = [DataType.INT8, DataType.UINT8, DataType.INT32, DataType.INT64, DataType.BOOL]


def gpu() -> Gpu:
    return Gpu(EmulatedGpu(), None)


def edge_values() -> np.ndarray:
    """Ties and near-ties of every narrow float format, thresholds, specials."""
    values = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 448.0, 464.0, 464.0001, 480.0, 57344.0, 61439.99]
    values += [61440.0, 65504.0, 65520.0, 3.4028234663852886e38, 3.4028235677973366e38, 1e39, 5e-324, 1e-45]
    values += [2.0**-149, 2.0**-150, 2.0**-24, 2.0**-25, 2.0**-133, 2.0**-134, 2.0**-9, 2.0**-10, 2.0**-16, 2.0**-17]
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2):
        info = ml_dtypes.finfo(dtype)
        bits = 1 + info.nmant
        for m in (1.0, 1.5, 1.75, 3.0):
            ulp = m * 2.0 ** (1 - bits)
            values += [1.0 + ulp / 2, 1.0 + ulp / 2 + 2.0**-40, 1.0 + ulp / 2 - 2.0**-40, 1.0 + 1.5 * ulp]
        values += [float(info.max), float(info.tiny), float(info.tiny) / 2, float(info.smallest_subnormal) * 1.5]
    values = np.array(values, np.float64)
    return np.concatenate([values, -values])


def random_values(n: int = 4000) -> np.ndarray:
    rng = np.random.default_rng(7)
    scale = np.exp2(rng.integers(-160, 140, n).astype(np.float64))
    return rng.standard_normal(n) * scale


def stored(values: np.ndarray, dtype: DataType) -> np.ndarray:
    g = gpu()
    out = np.zeros(values.shape, dtype.numpy)
    write(g, Array.from_host(g, values), out, dtype)
    return out


@pytest.mark.parametrize("dtype", FLOATS, ids=str)
def test_float_rounding_is_round_to_exactly(dtype: DataType) -> None:
    values = np.concatenate([edge_values(), random_values()])
    with np.errstate(all="ignore"):
        want = round_to(values, dtype)
    got = stored(values, dtype)
    nan = np.isnan(want.astype(np.float64))
    assert np.array_equal(np.isnan(got.astype(np.float64)), nan)  # a NaN's sign and payload are not values
    bad = np.flatnonzero((got.view(f"u{got.itemsize}") != want.view(f"u{want.itemsize}")) & ~nan)
    assert bad.size == 0, [(values[i], got[i], want[i]) for i in bad[:5]]


def test_the_bfloat16_tie_that_double_rounding_breaks() -> None:
    """1 + 2^-8 + 2^-30: float32 rounds it to 1 + 2^-8 (a bfloat16 tie) and a second rounding goes to even (1.0);
    the value is above the tie, so bfloat16's nearest is 1 + 2^-7."""
    got = stored(np.array([1 + 2.0**-8 + 2.0**-30]), DataType.BFLOAT16)
    assert float(got[0]) == 1 + 2.0**-7


@pytest.mark.parametrize("dtype", INTEGERS, ids=str)
def test_integer_targets_truncate_saturate_and_zero_nan(dtype: DataType) -> None:
    values = np.array([0.0, -0.0, 0.9, -0.9, 1.5, -1.5, 127.9, 128.0, -129.0, 255.5, 256.0, 2.0**31, -(2.0**31) - 1])
    values = np.concatenate([values, [2.0**63, -(2.0**63), 1e30, -1e30, np.nan, np.inf, -np.inf, 3.0, -7.2]])
    with np.errstate(all="ignore"):
        want = round_to(values, dtype)
    assert np.array_equal(stored(values, dtype), want)


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.int8, np.bool_]
)
def test_reads_widen_every_pattern_exactly(dtype: np.dtype) -> None:
    """Every bit pattern of a narrow type (all 65536 / 256) reads as its exact float64 value."""
    itemsize = np.dtype(dtype).itemsize
    patterns = np.arange(2 ** (8 * itemsize), dtype=f"u{itemsize}").view(dtype)
    if np.dtype(dtype) == np.bool_:
        patterns = np.array([False, True])
    got = read(gpu(), patterns, np.float64).host()
    with np.errstate(invalid="ignore"):
        want = (
            patterns.astype(np.float32).astype(np.float64)
            if np.dtype(dtype).kind == "V"
            else patterns.astype(np.float64)
        )
    assert np.array_equal(got, want, equal_nan=True)


def test_strided_reads_and_writes_reach_the_logical_elements() -> None:
    """A transposed view in and a column-sliced view out: each logical element lands where its strides say."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    source = base.T  # (6, 4), strides (1, 6) in elements
    g = gpu()
    value = read(g, source, np.float64)
    assert np.array_equal(value.host(), source.astype(np.float64))
    target = np.full((6, 8), -1.0, np.float16)
    write(g, value * 2.0, target[:, ::2], DataType.FLOAT16)
    assert np.array_equal(target[:, ::2], (source * 2).astype(np.float16))
    assert (target[:, 1::2] == -1).all()  # the elements between were not written


@pytest.mark.parametrize("target", [DataType.BFLOAT16, DataType.FP8_E4M3, DataType.INT8, DataType.FLOAT32])
def test_a_float64_buffer_gets_what_the_cpu_reference_stores_into_it(target: DataType) -> None:
    """Validation hands a narrow node float64 output buffers: the value rounded to the node's dtype (bfloat16,
    fp8, integers), or, where one cast rounds (float32 / float16 / float64), the float64 value itself."""
    values = np.array([1 + 2.0**-8 + 2.0**-30, -3.3, 500.0, 0.1, np.nan], np.float64)
    g = gpu()
    out = np.zeros(values.shape, np.float64)
    write(g, Array.from_host(g, values), out, target)
    with np.errstate(all="ignore"):
        want = values if target is DataType.FLOAT32 else round_to(values, target).astype(np.float64)
    assert np.array_equal(out, want, equal_nan=True)


def test_integer_results_bound_for_a_float_output_round_from_their_exact_value() -> None:
    g = gpu()
    out = np.zeros(4, ml_dtypes.bfloat16)
    values = np.array([3, -7, 257, 1 << 40], np.int64)
    write(g, Array.from_host(g, values, np.int64), out, DataType.BFLOAT16)
    assert np.array_equal(out, round_to(values, DataType.BFLOAT16))
