"""The GPU reference's device arrays (gpu_reference/arrays.py), one operation at a time on the emulator, against
NumPy doing the same data movement and reductions on the host (exact: small integers and float64 sums of a
few integers)."""

from __future__ import annotations

import numpy as np
import pytest

from sigdnn.plan_builders.cutile.backend import EmulatedGpu
from sigdnn.plan_builders.gpu_reference.arrays import Array
from sigdnn.plan_builders.gpu_reference.backend import Gpu


@pytest.fixture
def gpu() -> Gpu:
    return Gpu(EmulatedGpu(), None)


def test_reshape_infers_one_axis_and_refuses_a_wrong_size(gpu: Gpu) -> None:
    a = Array.from_host(gpu, np.arange(6.0).reshape(2, 3))
    assert a.reshape(3, -1).shape == (3, 2) and a.reshape((6,)).shape == (6,)
    np.testing.assert_array_equal(a.reshape(-1, 2).host(), np.arange(6.0).reshape(3, 2))
    with pytest.raises(ValueError, match=r"cannot reshape \(2, 3\) to \(4, 2\)"):
        a.reshape(4, 2)
    with pytest.raises(ValueError, match=r"cannot reshape \(2, 3\) to \(4, 1\)"):
        a.reshape(4, -1)  # 6 / 4 is no whole axis


@pytest.mark.parametrize(
    ("shape", "axes"),
    [((5,), (0,)), ((2, 3), (1, 0)), ((2, 3), ((1, 0),)), ((2, 3, 4), ((2, 0, 1),)), ((2, 3, 4), (1, 2, 0))],
    ids=str,
)
def test_transpose_takes_axes_as_arguments_or_one_tuple(gpu: Gpu, shape, axes) -> None:
    host = np.arange(float(np.prod(shape))).reshape(shape)
    got = Array.from_host(gpu, host).transpose(*axes)
    want = host.transpose(axes[0] if isinstance(axes[0], tuple) else axes)
    assert got.shape == want.shape
    np.testing.assert_array_equal(got.host(), want)


def test_matmul_of_two_and_three_dims(gpu: Gpu) -> None:
    rng = np.random.default_rng(0)
    a, b = rng.integers(-4, 5, (3, 5)).astype(float), rng.integers(-4, 5, (5, 2)).astype(float)
    got = Array.from_host(gpu, a).matmul(Array.from_host(gpu, b))
    assert got.shape == (3, 2)
    np.testing.assert_array_equal(got.host(), a @ b)
    a3, b3 = rng.integers(-4, 5, (2, 3, 5)).astype(float), rng.integers(-4, 5, (2, 5, 4)).astype(float)
    np.testing.assert_array_equal(Array.from_host(gpu, a3).matmul(Array.from_host(gpu, b3)).host(), a3 @ b3)


@pytest.mark.parametrize(
    ("a", "b", "b_dtype"),
    [((2, 3, 5), (2, 4, 2), np.float64), ((2, 3, 5), (3, 5, 2), np.float64), ((2, 3, 5), (2, 5, 2), np.int64)],
    ids=["inner", "batch", "dtype"],
)
def test_matmul_refuses_mismatched_operands(gpu: Gpu, a, b, b_dtype) -> None:
    x, y = Array.from_host(gpu, np.zeros(a)), Array.from_host(gpu, np.zeros(b), b_dtype)
    with pytest.raises(ValueError, match=r"matmul of float64\(2, 3, 5\) and"):
        x.matmul(y)


def test_an_integer_matmul_wraps_as_int64_and_keeps_every_product(gpu: Gpu) -> None:
    """Products past 2^63 wrap and sums wrap, as NumPy's int64 matmul; a float64 GEMM would round them."""
    rng = np.random.default_rng(1)
    a = rng.integers(-(2**62), 2**62, (2, 37, 41), dtype=np.int64)
    b = rng.integers(-(2**40), 2**40, (2, 41, 35), dtype=np.int64)
    b[0, 0, 0], a[1, 5] = 3, 2**62 + 1  # a wrapping product, a row of large values
    got = Array.from_host(gpu, a, np.int64).matmul(Array.from_host(gpu, b, np.int64))
    assert got.dtype == np.int64
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(got.host(), a @ b)


def test_sum_last_in_order_adds_left_to_right_from_zero(gpu: Gpu) -> None:
    """((0 + 1e16) + 1) - 1e16 + 1 is 1 left to right; a pairwise order gives 0. -0.0 rows sum to +0.0."""
    rows = np.array([[1e16, 1.0, -1e16, 1.0], [-0.0, -0.0, -0.0, -0.0], [1.0, 2.0, 3.0, 4.0]] * 100)
    got = Array.from_host(gpu, rows.reshape(10, 30, 4)).sum_last_in_order()
    want = np.zeros(rows.shape[0])
    for j in range(4):
        want = want + rows[:, j]
    assert got.shape == (10, 30)
    np.testing.assert_array_equal(got.host().reshape(-1), want)
    assert not np.signbit(got.host().reshape(-1)[1]) and want[0] == 1.0
    single = np.arange(5.0).reshape(5, 1) - 2.0  # rows of one element: each row's value, -0.0 + ... from +0.0
    np.testing.assert_array_equal(Array.from_host(gpu, single).sum_last_in_order().host(), single[:, 0])


def test_reduce_last_launches_rows_past_the_grid_limit_in_parts(gpu: Gpu, monkeypatch) -> None:
    from sigdnn.plan_builders.gpu_reference import arrays

    monkeypatch.setattr(arrays, "GRID_LIMITS", (3, 65535, 65535))
    host = np.arange(40.0).reshape(10, 4)
    launches = []
    real = gpu.launch
    monkeypatch.setattr(gpu, "launch", lambda name, grid, *args: launches.append(grid) or real(name, grid, *args))
    np.testing.assert_array_equal(Array.from_host(gpu, host).reduce_last("SUM").host(), host.sum(axis=1))
    assert launches == [(3, 1, 1)] * 3 + [(1, 1, 1)]


def test_a_grid_past_the_limits_is_an_execution_error_and_one_at_them_launches(gpu: Gpu, monkeypatch) -> None:
    from sigdnn.errors import ExecutionError
    from sigdnn.plan_builders.cutile import emulator

    for grid in ((1 << 24, 1, 1), (1, 65536, 1), (1, 1, 65536)):
        with pytest.raises(ExecutionError, match="the GPU reference's gemm kernel needs a grid of"):
            gpu.launch("gemm", grid)
    launched = []
    monkeypatch.setattr(emulator, "launch", lambda stream, grid, kernel, args: launched.append(grid))
    for grid in (((1 << 24) - 1, 1, 1), (1, 65535, 1), (1, 1, 65535), ((1 << 24) - 1, 65535, 65535)):
        gpu.launch("gemm", grid)
    assert launched == [((1 << 24) - 1, 1, 1), (1, 65535, 1), (1, 1, 65535), ((1 << 24) - 1, 65535, 65535)]


@pytest.mark.parametrize("shape", [(2, 3), (4, 1), (3, 2, 5)], ids=str)
@pytest.mark.parametrize("mode", ["SUM", "MAX", "MIN", "PROD"])
@pytest.mark.parametrize("dtype", [np.float64, np.int64])
def test_reduce_last_of_every_mode_and_dtype(gpu: Gpu, shape, mode: str, dtype) -> None:
    host = np.random.default_rng(len(shape)).integers(-3, 4, shape).astype(dtype)
    want = {"SUM": np.sum, "MAX": np.max, "MIN": np.min, "PROD": np.prod}[mode](host, axis=-1)
    got = Array.from_host(gpu, host, dtype).reduce_last(mode)
    assert got.shape == shape[:-1] and got.dtype == dtype
    np.testing.assert_array_equal(got.host(), want)


def test_an_int64_constant_past_two_to_the_53_is_exact(gpu: Gpu) -> None:
    big = 2**53 + 1  # not a float64
    assert Array.full(gpu, (3,), big, np.int64).host().tolist() == [big] * 3
    assert (Array.full(gpu, (2,), 1, np.int64) + big).host().tolist() == [big + 1] * 2


@pytest.mark.parametrize(("shape", "target"), [((1, 5), (5,)), ((2, 3), (3, 3)), ((2, 3), (2, 1, 3))], ids=str)
def test_a_broadcast_numpy_refuses_is_refused(gpu: Gpu, shape, target) -> None:
    with pytest.raises(ValueError, match="cannot broadcast"):
        Array.from_host(gpu, np.zeros(shape)).broadcast_to(target)


@pytest.mark.parametrize(
    ("make", "sides"),
    [
        (lambda a: a.transpose(3, 2, 1, 0), (256, 256)),  # the first two axes' offsets, then the last two's
        (lambda a: a.broadcast_to((4, 16, 16, 16, 16)), (1024, 256)),  # the best split on axis boundaries
        (lambda a: a.row(3), (16, 256)),
    ],
    ids=["transpose", "broadcast", "row"],
)
def test_strided_views_upload_two_maps_of_about_the_root_of_their_size(gpu: Gpu, monkeypatch, make, sides) -> None:
    """Not one map entry per element: a 65,536-element transpose uploads maps of 256 and 256 entries."""
    host = np.arange(16**4, dtype=np.float64).reshape(16, 16, 16, 16)
    uploads: list[int] = []
    original = Gpu.upload
    monkeypatch.setattr(Gpu, "upload", lambda self, a: uploads.append(np.asarray(a).size) or original(self, a))
    a = Array.from_host(gpu, host)
    uploads.clear()
    got = make(a)
    assert tuple(uploads) == sides
    np.testing.assert_array_equal(got.host(), make(_NumpyArray(host)))


class _NumpyArray:
    """The same three operations on a NumPy array, for the expected values."""

    def __init__(self, a: np.ndarray) -> None:
        self.a = a

    def transpose(self, *axes: int) -> np.ndarray:
        return self.a.transpose(axes)

    def broadcast_to(self, shape: tuple[int, ...]) -> np.ndarray:
        return np.broadcast_to(self.a, shape)

    def row(self, i: int) -> np.ndarray:
        return self.a[i]


def test_without_cutile_the_reason_names_the_module_and_the_package(monkeypatch) -> None:
    """On a machine with a GPU but no cuTile, the GPU reference says which import failed and what to install."""
    import importlib

    from sigdnn.plan_builders.gpu_reference import backend

    cuda = importlib.import_module("sigdnn.runtime.cuda")  # sys.modules' module, which backend's function imports from
    monkeypatch.setattr(cuda, "gpu_unavailable_reason", lambda: None)
    real = importlib.import_module

    def refuse_cutile(name: str, *args):
        if name == "cuda.tile":
            raise ModuleNotFoundError("No module named 'cuda.tile'")
        return real(name, *args)

    monkeypatch.setattr(importlib, "import_module", refuse_cutile)
    cuda.dsl_unavailable_reason.cache_clear()  # the answer is cached per process: ask afresh, and forget ours after
    try:
        assert backend.cutile_unavailable_reason() == (
            "cuda-tile is not importable (ModuleNotFoundError: No module named 'cuda.tile')"
        )
    finally:
        cuda.dsl_unavailable_reason.cache_clear()


@pytest.mark.parametrize("dtype", [np.int64, np.float64])
def test_counting_gives_each_elements_flat_index(gpu: Gpu, dtype: type) -> None:
    got = Array.counting(gpu, (3, 1100), dtype)
    assert got.dtype == np.dtype(dtype) and np.array_equal(got.host(), np.arange(3300).reshape(3, 1100))


def test_one_element_operands_are_read_in_place_and_wider_ones_broadcast(gpu: Gpu) -> None:
    """A one-element operand (a constant, a kept-dims reduction) is read as one value; a two-element one broadcasts."""
    x = Array.from_host(gpu, np.arange(6.0).reshape(2, 3))
    one, two = Array.from_host(gpu, np.array([[10.0]])), Array.from_host(gpu, np.array([[1.0], [2.0]]))
    np.testing.assert_array_equal((x + one).host(), np.arange(6.0).reshape(2, 3) + 10.0)
    np.testing.assert_array_equal((x * two).host(), np.arange(6.0).reshape(2, 3) * [[1.0], [2.0]])
    np.testing.assert_array_equal((x - 0.5).host(), np.arange(6.0).reshape(2, 3) - 0.5)


def test_small_read_only_uploads_are_kept_per_device_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Index maps and constants go up once per device context (Gpu objects come and go a node execution), the
    least recently used out past KEPT_UPLOADS, and arrays past KEPT_UPLOAD_ELEMENTS each time."""
    from sigdnn.plan_builders.gpu_reference import backend

    uploads = []
    real = Gpu.upload
    monkeypatch.setattr(Gpu, "upload", lambda self, host: uploads.append(host.size) or real(self, host))
    monkeypatch.setattr(backend, "KEPT_UPLOADS", 3)
    context = EmulatedGpu()
    first, again = Gpu(context, None), Gpu(context, None)
    a = first.upload_kept(np.arange(4))
    assert again.upload_kept(np.arange(4)) is a and uploads == [4]
    assert again.upload_kept(np.arange(4.0)) is not a  # another dtype, the same values
    assert again.upload_kept(np.arange(4).reshape(2, 2)) is not a  # another shape
    assert Gpu(EmulatedGpu(), None).upload_kept(np.arange(4)) is not a  # another context
    assert len(uploads) == 4
    fresh = Gpu(EmulatedGpu(), None)
    kept = [fresh.upload_kept(np.full(2, i)) for i in range(3)]  # as many as KEPT_UPLOADS: none dropped
    assert all(fresh.upload_kept(np.full(2, i)) is kept[i] for i in (0, 1)) and len(uploads) == 7
    fresh.upload_kept(np.full(2, 3))  # a fourth: the least recently used goes, 2 (0 and 1 were read since)
    assert all(fresh.upload_kept(np.full(2, i)) is kept[i] for i in (0, 1)) and len(uploads) == 8
    assert fresh.upload_kept(np.full(2, 2)) is not kept[2] and len(uploads) == 9
    most = np.zeros(backend.KEPT_UPLOAD_ELEMENTS)
    assert first.upload_kept(most) is first.upload_kept(most)
    big = np.zeros(backend.KEPT_UPLOAD_ELEMENTS + 1)
    assert first.upload_kept(big) is not first.upload_kept(big)
    assert first.constant_array(2.5, np.float64, 3).data is Gpu(context, None).constant_array(2.5, np.float64, 3).data
    assert first.constant_array(2.5, np.float64, 3).shape == (1, 1, 1)
    assert first.constant_array(7, np.int64, 2).data.size == 1
    np.testing.assert_array_equal(first.constant_array(-0.0, np.float64, 1).host(), [-0.0])
    assert np.signbit(first.constant_array(-0.0, np.float64, 1).host()[0])  # -0.0 is no 0.0


def test_outer_offsets_are_made_once_and_read_only() -> None:
    from sigdnn.plan_builders.gpu_reference.arrays import outer_offsets

    rows, cols = outer_offsets((2, 3, 4), (12, 4, 1), 5)
    assert outer_offsets([2, 3, 4], [12, 4, 1], 5)[0] is rows
    np.testing.assert_array_equal(np.add.outer(rows, cols).ravel(), np.arange(24) + 5)
    with pytest.raises(ValueError, match="read-only"):
        rows[0] = 1


def test_read_only_uploads_are_kept_by_identity_whatever_their_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan's frozen maps go up once per device context, however large, found by the array itself (its bytes are
    not read again); an equal writeable array is not that array; the copy goes when the array does."""
    import gc

    from sigdnn.plan_builders.gpu_reference import backend

    uploads = []
    real = Gpu.upload
    monkeypatch.setattr(Gpu, "upload", lambda self, host: uploads.append(host.size) or real(self, host))
    context = EmulatedGpu()
    big = np.arange(backend.KEPT_UPLOAD_ELEMENTS + 1, dtype=np.int64)
    big.flags.writeable = False
    first = Gpu(context, None).upload_kept(big)
    assert Gpu(context, None).upload_kept(big) is first and uploads == [big.size]
    np.testing.assert_array_equal(np.asarray(first), big)
    assert Gpu(EmulatedGpu(), None).upload_kept(big) is not first  # another context: its own copy
    writeable = big.copy()
    assert Gpu(context, None).upload_kept(writeable) is not first  # not the frozen array: uploaded as any other
    assert len(uploads) == 3
    held = backend._held[context]
    assert list(held) == [id(big)]
    del big
    gc.collect()
    assert not held  # the map died: its device copy is let go
