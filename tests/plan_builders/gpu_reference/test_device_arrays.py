"""The GPU reference's device-memory path on the CPU: DeviceArrays over host memory, kernels emulated.

On a GPU the plans get DeviceArrays, allocate scratch with the context,
upload index maps, and stage host arrays handed to a single node (what
validation does). Here the context is the cuTile tests' HostGpuContext
(DeviceArrays pointing at NumPy buffers, without its emulated-kernel marker,
so the library takes its GPU path) and each launch turns the DeviceArrays it
passes into NumPy views for the emulator: everything but cuTile itself runs.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
from gpu_reference_emulation import ulps

import sigdnn
from sigdnn.executor.gpu_memory import GpuMemory
from sigdnn.plan_builders.cutile import emulator
from sigdnn.plan_builders.cutile.backend import EmulatedBackend
from sigdnn.plan_builders.gpu_reference import backend, base
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.runtime.device_array import DeviceArray
from sigdnn.signature_keys import key_for
from sigdnn.validation import random_inputs

sys.path.append(str(Path(__file__).resolve().parents[1] / "cutile"))
from emulated import HostGpuContext


class DeviceOnlyContext(HostGpuContext):
    """Host memory presented as device memory, and no emulated-kernel marker: the library's GPU path."""

    def __init__(self) -> None:
        super().__init__()
        self.kernel_backend = None
        self.synchronized = 0

    def synchronize(self) -> None:
        self.synchronized += 1


def as_numpy(arg: object) -> object:
    if isinstance(arg, DeviceArray):
        return EmulatedBackend.view(arg, arg.shape, arg.strides, arg.dtype)
    return arg


@pytest.fixture
def device_path(monkeypatch: pytest.MonkeyPatch) -> DeviceOnlyContext:
    monkeypatch.setattr(base, "unavailable_reason", lambda: None)
    monkeypatch.setitem(backend._modules, False, backend.kernel_module(True))  # the same text, emulated
    launches = []

    def launch(self, name, grid, *args):
        launches.append(name)
        if 0 not in grid:
            emulator.launch(self.stream, grid, getattr(self.kernels, name), [as_numpy(a) for a in args])

    monkeypatch.setattr(backend.Gpu, "launch", launch)
    context = DeviceOnlyContext()
    context.launches = launches
    return context


def graph() -> sigdnn.Graph:
    g = sigdnn.Graph("g", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (2, 3, 5, 4), layout="NHWC"), g.tensor("w", (4, 3, 3, 3))
    y = g.conv_fprop(x, w, padding=(1, 1))
    g.transpose(g.pointwise("relu_fwd", y), (0, 2, 3, 1)).set_output(True).set_name("z")
    return g


def test_a_graph_runs_on_device_arrays_and_matches_the_cpu_reference(device_path) -> None:
    g = graph()
    inputs = random_inputs(g, 2)
    ex = sigdnn.Executor("gpu-reference")
    ex._memory = GpuMemory(context=device_path)
    got = ex.execute(ex.prepare(g), inputs)["z"]
    cpu = sigdnn.Executor("reference")
    want = cpu.execute(cpu.prepare(g), inputs)["z"]
    assert int(ulps(got, want).max()) == 0
    assert device_path.synchronized >= 3  # each node waits for its own launches
    assert {"gather", "gemm", "scatter", "elementwise"} <= set(device_path.launches)


def test_host_arrays_handed_to_a_node_are_staged_and_written_back(device_path) -> None:
    """Validation's runs hand a node host arrays (outputs of another dtype too): staged in, copied back."""
    g = graph()
    node = g.nodes[0]
    plan = base.GpuReferenceBuilder.build(
        sigdnn.registry.DEFAULT_REGISTRY.find("gpu_reference.conv_fprop"),
        node,
        g,
        sigdnn.registry.BuildContext(key_for(node, g), Device("gpu", device_path), g),
    )
    inputs = random_inputs(g, 0)
    y = np.zeros(g.tensors[node.op.y].dims)  # float64, as validation's carried-error runs give it
    plan.execute({"x": inputs["x"], "w": inputs["w"], "y": y}, ExecutionContext(Device("gpu", device_path), 0))
    cpu = sigdnn.registry.DEFAULT_REGISTRY.find("reference.conv_fprop")
    want = np.zeros_like(y)
    cpu.build(node, g, sigdnn.registry.BuildContext(key_for(node, g), Device(), g)).execute(
        {"x": inputs["x"], "w": inputs["w"], "y": want}, ExecutionContext()
    )
    assert np.array_equal(y, want) and np.abs(y).max() > 0


def test_part_and_shaped_views_address_the_right_elements(device_path) -> None:
    gpu = backend.Gpu(device_path, 0)
    flat = gpu.upload(np.arange(12, dtype=np.float64))
    assert isinstance(flat, DeviceArray) and not gpu.emulated
    assert gpu.download(gpu.part(flat, 4, 3), 3).tolist() == [4.0, 5.0, 6.0]
    grid = gpu.shaped(flat, (3, 4))
    assert grid.shape == (3, 4) and grid.strides == (4, 1) and grid.ptr == flat.ptr
    assert gpu.empty(0, np.float64).shape == (1,)  # an empty scratch still has an address
    with pytest.raises(sigdnn.errors.ExecutionError, match="takes device arrays"):
        gpu.raw(memoryview(b"12345678").cast("d"), (1,), (1,))


def test_the_cutile_path_loads_the_kernel_file_and_launches_through_ct(monkeypatch: pytest.MonkeyPatch) -> None:
    """With cuda.tile stood in by the emulator module: kernel_module(False) imports kernels/tiles.py as a module
    (as cuTile needs, to read its source) and Gpu.launch goes through ct.launch."""
    import types

    package = types.ModuleType("cuda")
    package.tile = emulator
    monkeypatch.setitem(sys.modules, "cuda", package)
    monkeypatch.setitem(sys.modules, "cuda.tile", emulator)
    monkeypatch.delitem(backend._modules, False, raising=False)
    module = backend.kernel_module(False)
    assert module.__file__ == str(backend.KERNEL_FILE) and module.ct is emulator
    assert backend.kernel_module(False) is module  # loaded once
    gpu = backend.Gpu(DeviceOnlyContext(), 0)
    values, out = np.array([1.5, -2.0, 3.0]), np.zeros(3)
    gpu.launch("elementwise", (1, 1, 1), values, values, values, 0.0, 2.0, 0.0, out, 4, module.MUL, 0, 1, 1)
    assert out.tolist() == [3.0, -4.0, 6.0]
    gpu.launch("elementwise", (0, 1, 1), values, values, values, 0.0, 0.0, 0.0, out, 4, module.ADD, 0, 0, 1)
    assert out.tolist() == [3.0, -4.0, 6.0]  # an empty grid launches nothing


def test_tile_shapes_are_powers_of_two_and_bool_is_read_as_bytes() -> None:
    """What cuTile requires and the emulator does not check: power-of-two tile extents, no bool arrays."""
    for extent in (backend.TILE, backend.ROW_TILE, *backend.GEMM_TILE):
        assert extent & (extent - 1) == 0
    for name in ("bool", "float8_e4m3fn", "float8_e5m2"):
        assert backend.kernel_dtype(name) == np.uint8
    assert backend.kernel_dtype("bfloat16") != np.uint8


def test_a_span_covers_a_tensors_elements() -> None:
    assert backend.span((2, 3), (3, 1)) == 6
    assert backend.span((2, 3), (1, 2)) == 6  # transposed
    assert backend.span((4,), (3,)) == 10
    assert backend.span((0, 3), (3, 1)) == 0


def test_without_cuda_tile_the_reason_names_it() -> None:
    reason = backend.cutile_unavailable_reason()
    assert reason is not None and "cuda" in reason


class RecordingDmma:
    """A stand-in for kernels/dmma_gemm.py: its tile extents and a gemm that records what it is given."""

    TILE_M, TILE_N = 128, 128

    def __init__(self) -> None:
        self.calls: list[tuple[int, ...]] = []

    def gemm(self, *args: int) -> None:
        self.calls.append(args)


def test_gemm_goes_to_the_dmma_kernel_where_it_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU with the DMMA module, Gpu.gemm hands it the three addresses, the extents and the stream, with
    columns on grid x; a grid past the launch limits is refused by name; the emulator keeps the cuTile kernel."""
    dmma = RecordingDmma()
    monkeypatch.setitem(backend._modules, "dmma", dmma)
    gpu = backend.Gpu(DeviceOnlyContext(), 7)
    a, b, out = (DeviceArray(address, (1,), (1,), np.float64) for address in (4096, 8192, 12288))
    gpu.gemm(a, b, out, (2, 300, 100, 5))
    assert dmma.calls == [(4096, 8192, 12288, 2, 300, 100, 5, 7)]
    gpu.gemm(a, b, out, (1, 128 * 65535, 1, 1))  # grid y at its bound: launched
    with pytest.raises(sigdnn.errors.ExecutionError, match=r"DMMA GEMM needs a grid of \(1, 65536, 1\)"):
        gpu.gemm(a, b, out, (1, 128 * 65535 + 1, 1, 1))
    with pytest.raises(sigdnn.errors.ExecutionError, match=r"grid of \(1, 1, 65536\)"):
        gpu.gemm(a, b, out, (65536, 1, 1, 1))
    assert len(dmma.calls) == 2
    emulated = backend.Gpu(HostGpuContext(), None)
    x, y = np.arange(6.0), np.arange(6.0)
    product = np.zeros(4)
    emulated.gemm(x, y, product, (1, 2, 2, 3))
    assert product.tolist() == (x.reshape(2, 3) @ y.reshape(3, 2)).reshape(-1).tolist() and len(dmma.calls) == 2


def test_a_dmma_module_that_cannot_load_leaves_the_cutile_gemm_with_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    monkeypatch.setattr("sigdnn.runtime.cuda.dsl_unavailable_reason", lambda *args: asked.append(args))  # None
    monkeypatch.setitem(sys.modules, "sigdnn.plan_builders.gpu_reference.kernels.dmma_gemm", None)  # import fails
    monkeypatch.delitem(backend._modules, "dmma", raising=False)
    with pytest.warns(RuntimeWarning, match=r"DMMA GEMM is unavailable \(ModuleNotFoundError: import of "
                      r"sigdnn\.plan_builders\.gpu_reference\.kernels\.dmma_gemm halted.*its cuTile GEMM serves"):  # fmt: skip
        assert backend.dmma_gemm() is None
    assert asked == [("cutlass.cute", "nvidia-cutlass-dsl")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert backend.dmma_gemm() is None  # answered once: no second warning


@pytest.mark.parametrize("y_dtype", ["float32", "float16"], ids=["bits", "rounded"])
def test_a_data_movement_node_stages_host_arrays_and_waits_for_its_launches(device_path, y_dtype: str) -> None:
    """A transpose handed host arrays (as validation hands a single node): x staged in, y copied back, whether its
    elements are copied as bits or rounded to another dtype, and one wait for the device."""
    g = sigdnn.Graph("tr", io_dtype="float32", compute_dtype="float32")
    g.transpose(g.tensor("x", (2, 3)), (1, 0), name="tr").set_output(True).set_data_type(y_dtype)
    node = g.nodes[0]
    plan = sigdnn.registry.DEFAULT_REGISTRY.find("gpu_reference.transpose").build(
        node, g, sigdnn.registry.BuildContext(key_for(node, g), Device("gpu", device_path), g)
    )
    x = np.array([[1.0, -2.5, 3.0], [0.1, 65520.0, -0.0]], np.float32)
    y = np.full((3, 2), 7.0, np.dtype(y_dtype))
    plan.execute({"x": x, "y": y}, ExecutionContext(Device("gpu", device_path), 0))
    with np.errstate(over="ignore"):
        want = x.T.astype(np.float64).astype(y_dtype)  # one rounding of the exact value
    np.testing.assert_array_equal(y, want)
    assert device_path.synchronized == 1
