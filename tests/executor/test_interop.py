"""What users hand the executor and get back: torch tensors of every dtype, DLPack, Tensor keys, layouts."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

import sigdnn
from sigdnn.errors import GraphError, UsageError, VariantPackError


def scale_graph(dtype: str = "bfloat16") -> sigdnn.Graph:
    g = sigdnn.Graph("scale", io_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", (2, 3))
    g.pointwise("mul", x, g.scalar("two", 2.0, dtype="float32"), name="double").set_output(True).set_name("y")
    return g


@pytest.mark.parametrize(
    ("torch_name", "dtype"),
    [("bfloat16", "bfloat16"), ("float8_e4m3fn", "fp8_e4m3"), ("float8_e5m2", "fp8_e5m2"), ("float16", "float16")],
)
def test_torch_cpu_tensors_of_every_float_dtype_go_in_and_come_out(torch_name: str, dtype: str) -> None:
    torch = pytest.importorskip("torch")
    values = torch.tensor([[0.5, -1.0, 3.0], [0.25, 2.0, -0.125]], dtype=torch.float32)
    x = values.to(getattr(torch, torch_name))
    out = sigdnn.Executor().run(scale_graph(dtype), {"x": x}, out="torch")
    y = out["y"]
    assert isinstance(y, torch.Tensor) and y.dtype == x.dtype
    assert torch.equal(y.float(), (x.float() * 2).to(x.dtype).float())


def test_torch_input_is_read_without_a_copy() -> None:
    torch = pytest.importorskip("torch")
    from sigdnn.executor.host_arrays import from_torch

    x = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    view = from_torch(x, "x")
    assert view.dtype == np.dtype(ml_dtypes.bfloat16)
    assert view.ctypes.data == x.data_ptr()


class HostDlpackOnly:
    """A host array that offers nothing but DLPack (as JAX or CuPy-on-host objects do)."""

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self) -> tuple[int, int]:
        return self._array.__dlpack_device__()


def test_a_host_dlpack_producer_is_accepted() -> None:
    x = np.array([[1, 2, 3], [4, 5, 6]], np.float32)
    out = sigdnn.Executor().run(scale_graph("float32"), {"x": HostDlpackOnly(x)})
    np.testing.assert_array_equal(out["y"], 2 * x)


def test_tensor_objects_are_variant_pack_keys() -> None:
    g = scale_graph("float32")
    x = np.ones((2, 3), np.float32)
    y = np.zeros((2, 3), np.float32)
    out = sigdnn.Executor().run(g, {g.tensor_by_name("x"): x, g.tensor_by_name("y"): y})
    assert out["y"] is y and (y == 2).all()


def test_a_misspelt_name_gets_a_close_match_and_the_valid_names() -> None:
    with pytest.raises(VariantPackError, match=r"did you mean 'x'\?.*'x', 'y'"):
        sigdnn.Executor().run(scale_graph("float32"), {"x": np.ones((2, 3), np.float32), "xx": 1})


def test_a_channels_last_shaped_array_gets_the_logical_dims_hint() -> None:
    g = sigdnn.Graph("nhwc", io_dtype="float32")
    x = g.tensor("x", (2, 8, 10, 10), layout="NHWC")
    g.pointwise("neg", x, name="n").set_output(True).set_name("y")
    with pytest.raises(VariantPackError, match=r"logical dims \(N, C, spatial...\).*transpose\(0, 3, 1, 2\)"):
        sigdnn.Executor().run(g, {"x": np.ones((2, 10, 10, 8), np.float32)})


def test_outputs_the_executor_allocates_keep_the_declared_strides() -> None:
    g = sigdnn.Graph("nhwc", io_dtype="float32")
    x = g.tensor("x", (2, 3, 4, 5), layout="NHWC")
    y = g.pointwise("neg", x, name="n").set_output(True).set_name("y")
    assert y.strides == (60, 1, 15, 3)
    xa = np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5)
    out = sigdnn.Executor().run(g, {"x": xa})["y"]
    assert out.strides == tuple(4 * s for s in y.strides)
    np.testing.assert_array_equal(out, -xa)


def test_a_graph_without_outputs_is_a_graph_error() -> None:
    g = sigdnn.Graph("silent", io_dtype="float32")
    g.pointwise("neg", g.tensor("x", (3,)), name="n")
    with pytest.raises(GraphError, match=r"no outputs.*set_output\(True\)"):
        sigdnn.Executor().prepare(g)


def test_duplicate_tensor_names_are_refused_at_the_call() -> None:
    g = sigdnn.Graph("dup", io_dtype="float32")
    g.tensor("x", (3,))
    with pytest.raises(GraphError, match="duplicate tensor name 'x'"):
        g.tensor("x", (4,))
    assert len(g.tensors) == 1


def test_unknown_choices_are_usage_errors_that_still_read_as_value_errors() -> None:
    with pytest.raises(UsageError, match="unknown backend 'cpu'; expected one of reference, gpu"):
        sigdnn.Executor("cpu")
    with pytest.raises(ValueError):
        sigdnn.Executor("cpu")
    with pytest.raises(UsageError, match="takes bytes, a path or a Graph, not int"):
        sigdnn.Executor().prepare(3)
    with pytest.raises(UsageError, match="out='jax'"):
        sigdnn.Executor().run(scale_graph("float32"), {"x": np.ones((2, 3), np.float32)}, out="jax")


def test_a_torch_tensor_off_the_host_is_refused_with_its_device() -> None:
    torch = pytest.importorskip("torch")
    x = torch.empty((2, 3), dtype=torch.float32, device="meta")
    with pytest.raises(VariantPackError, match=r"tensor 'x' \(uid \d+\): torch tensor is on meta; .* host memory"):
        sigdnn.Executor().run(scale_graph("float32"), {"x": x})


class DeviceDlpack(HostDlpackOnly):
    """A DLPack producer that says its memory is on a CUDA device (kDLCUDA = 2)."""

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


class BrokenDlpackDevice(HostDlpackOnly):
    def __dlpack_device__(self) -> tuple[int, int]:
        raise RuntimeError("no device")


class BrokenDlpackExport(HostDlpackOnly):
    def __dlpack__(self, **kwargs: Any) -> Any:
        raise RuntimeError("export failed")


@pytest.mark.parametrize("producer", [DeviceDlpack, BrokenDlpackDevice])
def test_a_dlpack_producer_not_on_the_host_is_a_device_buffer(producer: type) -> None:
    """Device memory, or a producer that cannot say where its memory is: never read as host memory."""
    x = producer(np.ones((2, 3), np.float32))
    with pytest.raises(VariantPackError, match=rf"got a device buffer \({producer.__name__}\)"):
        sigdnn.Executor().run(scale_graph("float32"), {"x": x})


def test_a_host_dlpack_export_that_fails_is_the_callers_error() -> None:
    x = BrokenDlpackExport(np.ones((2, 3), np.float32))
    with pytest.raises(VariantPackError, match=r"its DLPack export could not be read: RuntimeError: export failed"):
        sigdnn.Executor().run(scale_graph("float32"), {"x": x})


class HasDataPtr:
    """Not torch, though it has a data_ptr (as some foreign tensors do)."""

    def data_ptr(self) -> int:
        return 0


def test_only_torch_objects_are_read_as_torch_tensors() -> None:
    with pytest.raises(VariantPackError, match=r"expected a NumPy array, got HasDataPtr"):
        sigdnn.Executor().run(scale_graph("float32"), {"x": HasDataPtr()})
