"""Validation's bookkeeping on the device (validation/device_arrays.py) against the host's (accuracy/arrays.py).

Every operation of ``DeviceArrays`` runs the GPU reference's kernels: here on
the emulator over NumPy buffers and, through the cuTile tests' host-backed
GPU context, over DeviceArrays (the path a GPU takes). Each must give what
``HOST`` gives, bit for bit: the two truths' bounds are the same only then.
The random draws are also checked against the documented hash worked in
Python integers, and for the balance a perturbation needs.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.arrays import HASH_ROUNDS, HOST, PRIME, SEED_STRIDE
from sigdnn.accuracy.compare import compare, compare_in
from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.plan_builders.cutile.backend import EmulatedGpu
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.runtime.device_array import DeviceArray
from sigdnn.validation.device_arrays import DeviceArrays

sys.path.append(str(Path(__file__).resolve().parents[1] / "plan_builders" / "cutile"))
from emulated import HostGpuContext, host_gpu_executor, make_available


def device_only(monkeypatch: pytest.MonkeyPatch) -> HostGpuContext:
    """Host memory presented as device memory, without the emulated-kernel marker: the GPU reference's GPU path
    (DeviceArrays everywhere), each launch's DeviceArrays handed to the emulator as NumPy views."""
    from sigdnn.plan_builders.cutile import emulator
    from sigdnn.plan_builders.cutile.backend import EmulatedBackend
    from sigdnn.plan_builders.gpu_reference import backend, base

    monkeypatch.setattr(base, "unavailable_reason", lambda: None)
    monkeypatch.setitem(backend._modules, False, backend.kernel_module(True))  # the same text, emulated

    def launch(self, name, grid, *args):  # type: ignore[no-untyped-def]
        views = [
            EmulatedBackend.view(a, a.shape, a.strides, a.dtype) if isinstance(a, DeviceArray) else a for a in args
        ]
        if 0 not in grid:
            with np.errstate(all="ignore"):  # (as Gpu.launch: a GPU raises no floating-point exceptions)
                emulator.launch(self.stream, grid, getattr(self.kernels, name), views)

    monkeypatch.setattr(backend.Gpu, "launch", launch)
    monkeypatch.setattr(backend, "dmma_gemm", lambda: None)
    context = HostGpuContext()
    context.kernel_backend = None
    return context


@pytest.fixture(params=["emulated", "device arrays"])
def xp(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> DeviceArrays:
    context = EmulatedGpu() if request.param == "emulated" else device_only(monkeypatch)
    arrays = DeviceArrays(ExecutionContext(Device("gpu", context), 0))
    assert arrays.gpu.emulated == (request.param == "emulated")
    return arrays


def host(xp: DeviceArrays, x: object) -> np.ndarray:
    got = xp.host(x)
    assert isinstance(got, np.ndarray)
    return got


def hashed_by_hand(seed: int, i: int) -> int:
    x = (i + (seed * SEED_STRIDE + 1) % PRIME) % PRIME
    for c in HASH_ROUNDS:
        x = (x * x + c) % PRIME
    return x


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
@pytest.mark.parametrize("shape", [(), (5,), (3, 1000), (2, 3, 1025)])
def test_both_sides_draw_the_documented_hash(xp: DeviceArrays, seed: int, shape: tuple[int, ...]) -> None:
    signs, fractions = HOST.random_signs(seed, shape), HOST.random_fractions(seed, shape)
    assert signs.shape == fractions.shape == shape
    flat_signs, flat_fractions = signs.reshape(-1), fractions.reshape(-1)
    for i in {0, math.prod(shape) // 2, math.prod(shape) - 1}:
        x = hashed_by_hand(seed, i)
        assert flat_signs[i] == 1.0 - 2.0 * (x % 2)
        assert flat_fractions[i] == x * (2.0 / PRIME) - 1.0
    assert np.array_equal(host(xp, xp.random_signs(seed, shape)), signs)
    assert np.array_equal(host(xp, xp.random_fractions(seed, shape)), fractions)


def test_the_draws_are_balanced_and_seeds_independent() -> None:
    signs, other = HOST.random_signs(3, (1000, 1000)), HOST.random_signs(4, (1000, 1000))
    fractions = HOST.random_fractions(3, (10**6,))
    assert set(np.unique(signs)) == {-1.0, 1.0} and abs(signs.mean()) < 0.005
    assert abs((signs * other).mean()) < 0.005  # another seed: another pattern
    assert -1.0 < fractions.min() < -0.999 and 0.999 < fractions.max() < 1.0 and abs(fractions.mean()) < 0.005
    assert abs(np.corrcoef(fractions[:-1], fractions[1:])[0, 1]) < 0.005  # neighbours unrelated
    counts = np.histogram(fractions, 10, (-1.0, 1.0))[0]
    assert counts.min() > 0.98e5 and counts.max() < 1.02e5


def special_values(shape: tuple[int, ...], seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal(shape) * 10.0 ** np.random.default_rng(seed + 1).integers(
        -8, 8, shape
    )
    flat = x.reshape(-1)
    flat[:6] = (np.inf, -np.inf, np.nan, 0.0, -0.0, 5e-324)
    return x


@pytest.mark.parametrize("dtype", [np.float64, np.float32, ml_dtypes.bfloat16])
def test_each_operation_matches_the_host(xp: DeviceArrays, dtype: type) -> None:
    a64, b64 = special_values((3, 70), 0), special_values((3, 70), 5)
    b64.reshape(-1)[6:9] = (np.nan, np.inf, -np.inf)  # NaN / Inf meeting finite values of a
    a, b = a64.astype(dtype), b64.astype(dtype)
    da, db = xp.upload(a), xp.upload(b)
    row = xp.upload(np.arange(70.0))
    with np.errstate(all="ignore"):
        pairs = {
            "widen": (xp.widen(da), HOST.widen(a)),
            "abs": (xp.abs(da), HOST.abs(a)),
            "magnitude": (xp.magnitude(da), HOST.magnitude(a)),
            "finite_or_zero": (xp.finite_or_zero(da), HOST.finite_or_zero(a)),
            "finite": (xp.finite(da), HOST.finite(a)),
            "add": (xp.add(da, db), HOST.add(a, b)),
            "add a number": (xp.add(da, 0.1), HOST.add(a, 0.1)),
            "sub": (xp.sub(da, db), HOST.sub(a, b)),
            "mul": (xp.mul(da, db), HOST.mul(a, b)),
            "mul broadcast": (xp.mul(da, row), HOST.mul(a, np.arange(70.0))),
            "fmax": (xp.fmax(xp.widen(da), xp.widen(db)), HOST.fmax(HOST.widen(a), HOST.widen(b))),
            "where": (xp.where(xp.finite(da), da, db), HOST.where(HOST.finite(a), a, b)),
            "broadcast": (xp.broadcast(row, (2, 3, 70)), HOST.broadcast(np.arange(70.0), (2, 3, 70))),
            "round_to": (xp.round_to(xp.mul(da, 1.0 / 3.0), dtype), HOST.round_to(HOST.mul(a, 1.0 / 3.0), dtype)),
            "full": (xp.full((2, 5), 0.25), HOST.full((2, 5), 0.25)),
            "cast": (xp.cast(da, dtype), HOST.cast(a, dtype)),
        }
    for name, (got, want) in pairs.items():
        got = host(xp, got)
        assert got.shape == want.shape, name
        assert np.array_equal(got.astype(np.float64), np.asarray(want, np.float64), equal_nan=True), name
        if name in ("abs", "round_to", "cast"):
            assert got.dtype == np.dtype(dtype), name
    assert xp.largest_magnitude(da) == HOST.largest_magnitude(a) > 0
    assert xp.largest_magnitude(xp.upload(np.full(5000, np.nan))) == 0.0  # no finite element: 0, as the host's


@pytest.mark.parametrize("size", [2, 4095, 4096, 4097, 3 * 4096 * 4096 // 1000])
def test_whole_array_reductions_cover_every_element(xp: DeviceArrays, size: int) -> None:
    """Rows of 4096 reduced again and again: the last row padded; the largest element anywhere is found."""
    values = np.random.default_rng(size).uniform(0.0, 1.0, size)
    values[size // 3] = 7.0
    values[-1] = -3.0
    assert xp.largest_magnitude(xp.upload(values)) == 7.0
    values[-1] = 9.0
    assert xp.largest_magnitude(xp.upload(values)) == 9.0


TOLERANCE = Tolerance(atol=1e-6, rtol=2.0**-8, exact=False, reduction=1e-3, inner=0.0)


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn])
def test_a_passing_comparison_is_summarized_on_the_device_as_on_the_host(
    xp: DeviceArrays, dtype: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    info = ml_dtypes.finfo(dtype) if dtype.__module__.startswith("ml_dtypes") else np.finfo(dtype)
    want64 = np.random.default_rng(1).standard_normal((4, 33))
    want64.reshape(-1)[:5] = (0.0, float(info.smallest_subnormal), float(info.max), 1.0, -2.0)
    want = want64.astype(dtype)
    with np.errstate(over="ignore"):
        got = (want.astype(np.float64) * (1.0 + 2.0**-10)).astype(dtype)
    got.reshape(-1)[2] = want.reshape(-1)[2]  # the largest finite value: exact (a move up overflows)
    got.reshape(-1)[3] = np.float64(want.reshape(-1)[3]) * (1 + 2.0**-9)  # the largest error, twice
    got.reshape(-1)[7] = got.reshape(-1)[3]
    want.reshape(-1)[7] = want.reshape(-1)[3]
    if dtype is not ml_dtypes.float8_e4m3fn:  # (e4m3fn has no infinity)
        got.reshape(-1)[10] = want.reshape(-1)[10] = np.inf
    got.reshape(-1)[11] = want.reshape(-1)[11] = np.nan
    terms = np.abs(want64)
    expected = compare("t", got, want, TOLERANCE, terms)
    assert expected.passed
    arrays = [xp.upload(a) for a in (got, want, terms)]

    def no_host_copy(x: object) -> np.ndarray:
        raise AssertionError("a passing comparison's arrays came to the host")

    monkeypatch.setattr(xp, "host", no_host_copy)
    found, errors = compare_in(xp, "t", arrays[0], arrays[1], TOLERANCE, arrays[2])
    assert found == expected and errors is None


@pytest.mark.parametrize(
    ("got", "want", "bound", "passes"),
    [
        ([1.0, 2.0], [1.0, 2.5], [0.0, 0.5], True),  # an error of exactly the bound passes
        ([1.0, 2.0], [1.0, 2.5], [0.0, 0.4999], False),
        ([np.inf, np.nan, -np.inf], [np.inf, np.nan, -np.inf], [0.0] * 3, True),  # the same specials
        ([np.nan, 1.0], [1.0, 1.0], [1e300] * 2, False),
        ([1.0, np.inf], [1.0, -np.inf], [1e300] * 2, False),
        ([1.0, 1e308], [1.0, np.inf], [1e300] * 2, False),
        ([np.nan], [np.inf], [1e300], False),
    ],
)
def test_the_summary_declines_any_failing_element(xp: DeviceArrays, got, want, bound, passes: bool) -> None:
    found = xp.passing_summary(*(xp.upload(np.array(a)) for a in (got, want, bound)), 52, -1022)
    assert (found is not None) == passes


@pytest.mark.parametrize(
    ("got", "want", "dtype", "ulps"),
    [
        ([2.0**-149, 1.0], [0.0, 1.0], np.float32, 1.0),  # at 0: float32's smallest subnormal spacing
        ([2.0**-1074, 1.0], [0.0, 1.0], np.float64, 1.0),
        ([np.nextafter(np.finfo(np.float64).max, 0.0)], [np.finfo(np.float64).max], np.float64, 1.0),  # 2^971
        ([1.0 + 2.0**-9, 3.0], [1.0, 3.0], ml_dtypes.bfloat16, 0.25),  # bfloat16's ulp at 1 is 2^-7
        ([-1.5, 2.0], [-1.0, 2.0], np.float16, 512.0),
    ],
)
def test_the_summary_counts_ulps_of_the_output_dtype(xp: DeviceArrays, got, want, dtype, ulps: float) -> None:
    info = ml_dtypes.finfo(dtype) if dtype.__module__.startswith("ml_dtypes") else np.finfo(dtype)
    found = xp.passing_summary(xp.upload(np.array(got)), xp.upload(np.array(want)), xp.full((len(got),), 1e300),
                               int(info.nmant), int(info.minexp))  # fmt: skip
    assert found is not None and found[2] == ulps
    assert found[3] == 0 and found[4:] == (got[0], want[0])  # the first element has the largest error


@pytest.mark.parametrize("size", [1, 2, 4096, 4097, 3 * 4096 + 5])
def test_whole_array_sums_and_minimums_are_exact(xp: DeviceArrays, size: int) -> None:
    from sigdnn.plan_builders.gpu_reference.arrays import Array

    values = np.arange(size, dtype=np.float64) + 1.0
    array = Array.from_host(xp.gpu, values)
    assert xp._total(array, "SUM") == size * (size + 1) / 2
    assert xp._total(array, "MIN") == 1.0 and xp._total(array, "MAX") == size


def test_a_strided_view_is_read_through_its_strides_and_a_cast_to_its_own_dtype_is_itself(xp: DeviceArrays) -> None:
    values = np.arange(24.0).reshape(4, 6)
    device = xp.upload(values)
    assert xp.cast(device, np.float64) is device
    for view in (values.T, values[:, ::2], np.broadcast_to(values[:1], (3, 6))):
        np.testing.assert_array_equal(xp.host(xp.widen(view)), view)
    if isinstance(device, DeviceArray):  # views of device memory (a strided tensor's capture): no copy made first
        rows = xp.upload(np.arange(10.0).reshape(2, 5))
        views = {
            "transposed": ((6, 4), (1, 6), device, values.T),
            "a row's first columns": ((2, 3), (5, 1), rows, np.arange(10.0).reshape(2, 5)[:, :3]),
            "broadcast": ((3, 6), (0, 1), device, np.broadcast_to(values[:1], (3, 6))),
        }
        for name, (shape, strides, base, want) in views.items():
            view = DeviceArray(base.ptr, shape, strides, base.dtype, owner=base.owner, device_id=base.device_id)
            np.testing.assert_array_equal(xp.host(xp.widen(view)), want, err_msg=name)


@pytest.mark.parametrize("plant", ["beyond the bound", "a NaN", "an Inf of the other sign"])
def test_a_failing_comparison_comes_to_the_host_whole(xp: DeviceArrays, plant: str) -> None:
    want = np.random.default_rng(2).standard_normal((5, 40)).astype(np.float32)
    got = want.copy()
    got[1, 2] = {"beyond the bound": want[1, 2] * 1.5 + 1, "a NaN": np.nan, "an Inf of the other sign": -np.inf}[plant]
    want[1, 2] = {"an Inf of the other sign": np.inf}.get(plant, want[1, 2])
    carried = np.full(want.shape, 1e-3)
    expected = compare("t", got, want, TOLERANCE, None, carried)
    assert not expected.passed
    found, errors = compare_in(xp, "t", xp.upload(got), xp.upload(want), TOLERANCE, None, xp.upload(carried))
    assert repr(found) == repr(expected)  # (repr: a NaN worst value equals itself there)
    assert errors is not None and errors.got.shape == want.shape


def test_a_capture_stays_on_the_device_when_outputs_do(monkeypatch: pytest.MonkeyPatch) -> None:
    """Executor.execute(capture=, to_host=False) copies each step's writes on the device, before reuse."""
    g = sigdnn.Graph("chain", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (4, 64))
    t = g.pointwise("relu_fwd", g.pointwise("neg", x, name="a"), name="b")
    g.pointwise("exp", g.pointwise("neg", t, name="c"), name="d").set_output(True).set_name("y")
    data = {"x": np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)}
    ex = sigdnn.Executor("reference")
    on_host: dict[str, np.ndarray] = {}
    ex.execute(ex.prepare(g), data, capture=on_host)
    make_available(monkeypatch)
    gpu = host_gpu_executor(fusion=False)
    captured: dict[str, object] = {}
    gpu.execute(gpu.prepare(g), data, to_host=False, capture=captured)
    assert set(captured) == set(on_host) and len(captured) == 4
    for name, value in captured.items():
        assert isinstance(value, DeviceArray)
        np.testing.assert_allclose(gpu.memory.context.to_host(value), on_host[name], rtol=1e-6)


@pytest.fixture
def device_truth(monkeypatch: pytest.MonkeyPatch) -> sigdnn.Executor:
    """The GPU reference over DeviceArrays (``device_only``)."""
    from sigdnn.executor.gpu_memory import GpuMemory

    truth = sigdnn.Executor("gpu-reference", fusion=False, registry=truth_registry())
    truth._memory = GpuMemory(context=device_only(monkeypatch))
    return truth


def truth_registry() -> object:
    from sigdnn.validation.truth import GPU_REFERENCE_ONLY

    return GPU_REFERENCE_ONLY


def fused_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("fused", io_dtype="bfloat16", compute_dtype="float32")
    x, b = g.tensor("x", (8, 48)), g.tensor("b", (1, 48))
    t = g.pointwise("gelu_fwd", g.pointwise("add", x, b, name="bias"), name="gelu")
    y, _ = g.softmax(g.pointwise("mul", t, g.scalar("s", 0.5), name="scale"), name="softmax")
    g.pointwise("sub", y, t, name="residual").set_output(True).set_name("z")
    return g


def test_validation_on_device_arrays_judges_as_the_cpu_truth(monkeypatch: pytest.MonkeyPatch, device_truth) -> None:
    """The GPU path end to end (captures on the device, bookkeeping and comparisons there): every step and output
    comparison equals the CPU truth's, passing with the computed tolerances and failing (judged on the host) with
    a tolerance of nothing."""
    from sigdnn.validation.checks import bookkeeping, validate

    assert isinstance(bookkeeping(device_truth), DeviceArrays)
    make_available(monkeypatch)
    g = fused_graph()
    inputs = {k: np.asarray(v) for k, v in sigdnn.validation.random_inputs(g, 4).items()}
    for tolerance, passes in ((None, True), (Tolerance(0.0, 0.0, exact=False), False)):
        by_cpu = validate(g, inputs, executor=host_gpu_executor(), truth="cpu", tolerance=tolerance)
        by_gpu = validate(g, inputs, executor=host_gpu_executor(), truth=device_truth, tolerance=tolerance)
        assert by_gpu.truth == "gpu" and by_cpu.passed == passes
        assert len(by_gpu.nodes) < len(g.nodes)  # a fused region: its carried errors were made on the device
        assert repr(by_cpu.nodes) == repr(by_gpu.nodes) and repr(by_cpu.outputs) == repr(by_gpu.outputs)


def test_the_hosts_fold_modulo_the_prime_is_the_remainder() -> None:
    from sigdnn.accuracy.arrays import _modulo_prime

    edges = [0, 1, PRIME - 1, PRIME, PRIME + 1, PRIME + 2, 2 * PRIME, 2**31, 2**32 - 1, 2**62 - 1, 2**63 - 1]
    y = np.array(edges + list(np.random.default_rng(0).integers(0, 2**63 - 1, 1000)), dtype=np.uint64)
    want = [int(v) % PRIME for v in y]
    _modulo_prime(y)
    assert [int(v) for v in y] == want


@pytest.mark.parametrize(("values", "largest"), [([0.5, -0.25], 0.5), ([np.nan, -np.inf], 0.0), ([-3.0, 2.0], 3.0)])
def test_the_largest_magnitude_counts_finite_elements_only(xp: DeviceArrays, values: list, largest: float) -> None:
    assert HOST.largest_magnitude(np.array(values)) == largest == xp.largest_magnitude(xp.upload(np.array(values)))


def test_a_cast_to_another_dtype_converts_and_an_empty_total_is_the_identity(xp: DeviceArrays) -> None:
    from sigdnn.plan_builders.gpu_reference.arrays import Array

    values = np.array([0.1, -2.5, 3.0])
    cast = xp.cast(xp.upload(values), np.float32)
    assert np.dtype(cast.dtype) == np.float32 and np.array_equal(xp.host(cast), values.astype(np.float32))
    empty = Array.empty(xp.gpu, (0,))
    assert (xp._total(empty, "MAX"), xp._total(empty, "SUM")) == (-np.inf, 0.0)
