"""Variant packs: every mismatch with the graph is a VariantPackError naming the tensor, raised before any node runs."""

from __future__ import annotations

import collections
import types
from typing import Any

import numpy as np
import pytest

import sigdnn
from sigdnn import ExecutionPlan, VariantPackError

SENTINEL = -12345.0


def graph() -> sigdnn.Graph:
    """y = relu((x + b) * s): two inputs, one pass-by-value scalar, two virtual tensors, one output."""
    g = sigdnn.Graph("pack", io_dtype="float32", intermediate_dtype="float32")
    x = g.tensor("x", (2, 3))
    b = g.tensor("b", (3,))
    s = g.scalar("s", 2.0, dtype="float32")
    t = g.pointwise("add", x, b, name="adder")
    g.pointwise("relu_fwd", g.pointwise("mul", t, s, name="scaler"), name="act").set_output(True).set_name("y")
    return g


@pytest.fixture(scope="module")
def ex() -> sigdnn.Executor:
    return sigdnn.Executor()


@pytest.fixture(scope="module")
def plan(ex: sigdnn.Executor) -> ExecutionPlan:
    return ex.prepare(graph().serialize())


def inputs() -> dict[str, np.ndarray]:
    return {"x": np.arange(6, dtype=np.float32).reshape(2, 3) - 2, "b": np.array([1, -1, 0.5], dtype=np.float32)}


def expected(x: np.ndarray, b: np.ndarray, s: float = 2.0) -> np.ndarray:
    return np.maximum((x + b) * s, 0)


def uid(name: str) -> int:
    return graph().tensor_by_name(name).uid


def refused(ex: sigdnn.Executor, plan: ExecutionPlan, pack: dict[Any, Any], *needles: str) -> str:
    """execute must raise VariantPackError naming every needle, and leave a given output untouched."""
    out = np.full((2, 3), SENTINEL, dtype=np.float32)
    if "y" not in pack and uid("y") not in pack:
        pack = {**pack, "y": out}
    with pytest.raises(VariantPackError) as info:
        ex.execute(plan, pack)
    msg = str(info.value)
    for needle in needles:
        assert needle in msg, f"{needle!r} not in {msg!r}"
    assert (out == SENTINEL).all(), "a node ran before the pack was checked"
    return msg


def test_valid_pack_by_name(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    pack = inputs()
    np.testing.assert_array_equal(ex.execute(plan, pack)["y"], expected(**pack))


def test_any_mapping_is_a_pack(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    pack = inputs()
    for mapping in (types.MappingProxyType(pack), collections.OrderedDict(pack), collections.ChainMap(pack)):
        np.testing.assert_array_equal(ex.execute(plan, mapping)["y"], expected(**pack))


def test_valid_pack_by_uid_and_mixed(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    pack = inputs()
    by_uid = ex.execute(plan, {uid("x"): pack["x"], uid("b"): pack["b"]})["y"]
    mixed = ex.execute(plan, {np.int64(uid("x")): pack["x"], "b": pack["b"]})["y"]
    np.testing.assert_array_equal(by_uid, expected(**pack))
    np.testing.assert_array_equal(mixed, expected(**pack))


def test_output_is_written_in_place(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    out = np.empty((2, 3), dtype=np.float32)
    result = ex.execute(plan, {**inputs(), "y": out})
    assert result["y"] is out
    np.testing.assert_array_equal(out, expected(**inputs()))


def test_strided_arrays_are_accepted(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    big = np.zeros((4, 6), dtype=np.float32)
    big[::2, ::2] = inputs()["x"]
    out = np.zeros((3, 2), dtype=np.float32).T  # a transposed (column-major) output
    ex.execute(plan, {"x": big[::2, ::2], "b": inputs()["b"], "y": out})
    np.testing.assert_array_equal(out, expected(**inputs()))


def test_scalar_can_be_overridden(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    got = ex.execute(plan, {**inputs(), "s": 3.0})["y"]
    np.testing.assert_array_equal(got, expected(**inputs(), s=3.0))
    got = ex.execute(plan, {**inputs(), uid("s"): np.array([0.5], dtype=np.float32)})["y"]
    np.testing.assert_array_equal(got, expected(**inputs(), s=0.5))


# -- refusals ---------------------------------------------------------------------------


def test_missing_input(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    refused(ex, plan, {"x": inputs()["x"]}, "missing", "'b'", f"uid {uid('b')}")


def test_missing_every_input_lists_all(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    msg = refused(ex, plan, {}, "missing", "'x'", "'b'")
    assert "'s'" not in msg, "a pass-by-value scalar has its value in the graph"


@pytest.mark.parametrize("key", ["nope", 999, -1])
def test_extra_entry(ex: sigdnn.Executor, plan: ExecutionPlan, key: Any) -> None:
    refused(ex, plan, {**inputs(), key: np.zeros(3, np.float32)}, "extra", repr(key), "'pack'")


@pytest.mark.parametrize("key", [True, 1.0, None, (1,), b"x"], ids=repr)
def test_key_that_is_neither_name_nor_uid(ex: sigdnn.Executor, plan: ExecutionPlan, key: Any) -> None:
    refused(ex, plan, {**inputs(), key: np.zeros(3, np.float32)}, repr(key), "is neither a tensor name")


@pytest.mark.parametrize("name", ["adder::out_0", "scaler::out_0"])
def test_virtual_tensor_given(ex: sigdnn.Executor, plan: ExecutionPlan, name: str) -> None:
    refused(ex, plan, {**inputs(), name: np.zeros((2, 3), np.float32)}, f"'{name}'", "virtual")
    refused(ex, plan, {**inputs(), uid(name): np.zeros((2, 3), np.float32)}, f"'{name}'", "virtual")


def test_same_tensor_by_name_and_uid(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    refused(ex, plan, {**inputs(), uid("x"): inputs()["x"]}, "'x'", "twice")


@pytest.mark.parametrize("shape", [(3, 2), (2, 3, 1), (6,), (), (2, 4)], ids=str)
def test_wrong_shape(ex: sigdnn.Executor, plan: ExecutionPlan, shape: tuple[int, ...]) -> None:
    refused(ex, plan, {**inputs(), "x": np.zeros(shape, np.float32)}, "'x'", "shape", "[2, 3]")


def test_wrong_output_shape(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    refused(ex, plan, {**inputs(), "y": np.zeros((3, 2), np.float32)}, "'y'", "shape")


@pytest.mark.parametrize("dtype", ["float64", "float16", "int32", ">f4", "bool"])
def test_wrong_dtype(ex: sigdnn.Executor, plan: ExecutionPlan, dtype: str) -> None:
    refused(ex, plan, {**inputs(), "b": np.zeros(3, dtype)}, "'b'", "dtype", "float32")


def test_wrong_output_dtype(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    refused(ex, plan, {**inputs(), "y": np.zeros((2, 3), np.float64)}, "'y'", "dtype")


@pytest.mark.parametrize("obj", [[1.0, 2.0, 3.0], "abc", None, object(), 3.0], ids=lambda o: type(o).__name__)
def test_non_array(ex: sigdnn.Executor, plan: ExecutionPlan, obj: Any) -> None:
    refused(ex, plan, {**inputs(), "b": obj}, "'b'", "expected a NumPy array", type(obj).__name__)


class FakeCudaArray:
    """What CuPy / Numba device arrays look like to the reference backend."""

    __cuda_array_interface__ = {"shape": (3,), "typestr": "<f4", "data": (0, False), "version": 3}


class FakeDlpackOnly:
    def __dlpack__(self, stream: Any = None) -> Any:
        raise AssertionError("the reference backend must not import a device buffer")

    def __dlpack_device__(self) -> tuple[int, int]:
        return (2, 0)


@pytest.mark.parametrize("obj", [FakeCudaArray(), FakeDlpackOnly()], ids=lambda o: type(o).__name__)
def test_device_buffer_to_the_reference_backend(ex: sigdnn.Executor, plan: ExecutionPlan, obj: Any) -> None:
    refused(ex, plan, {**inputs(), "b": obj}, "'b'", "device buffer", type(obj).__name__, "host arrays")


def test_array_like_is_converted(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    class Host:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return inputs()["b"]

    np.testing.assert_array_equal(ex.execute(plan, {**inputs(), "b": Host()})["y"], expected(**inputs()))


def test_array_like_that_raises(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    class Broken:
        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            raise RuntimeError("driver fell over")

    refused(ex, plan, {**inputs(), "b": Broken()}, "'b'", "Broken", "driver fell over")


def test_read_only_output(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    out = np.zeros((2, 3), np.float32)
    out.flags.writeable = False
    refused(ex, plan, {**inputs(), "y": out}, "'y'", "read-only")


def test_overlapping_output(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    row = np.zeros(3, np.float32)
    out = np.lib.stride_tricks.as_strided(row, (2, 3), (0, 4), writeable=True)
    refused(ex, plan, {**inputs(), "y": out}, "'y'", "overlap")


def test_read_only_input_is_fine(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    x = inputs()["x"]
    x.flags.writeable = False
    b = np.broadcast_to(np.float32(1), (3,))  # read-only, stride 0: fine for an input
    np.testing.assert_array_equal(ex.execute(plan, {"x": x, "b": b})["y"], expected(x, np.ones(3, np.float32)))


@pytest.mark.parametrize("value", [[1.0, 2.0], np.zeros((2, 2), np.float32), "abc", object()], ids=repr)
def test_bad_scalar_override(ex: sigdnn.Executor, plan: ExecutionPlan, value: Any) -> None:
    refused(ex, plan, {**inputs(), "s": value}, "'s'", "pass-by-value")


def test_pack_that_is_not_a_mapping(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    with pytest.raises(VariantPackError, match="mapping"):
        ex.execute(plan, [("x", inputs()["x"])])  # type: ignore[arg-type]


def test_every_refusal_is_a_sigdnn_error(ex: sigdnn.Executor, plan: ExecutionPlan) -> None:
    """The contract callers rely on: catching SigdnnError is enough."""
    with pytest.raises(sigdnn.SigdnnError):
        ex.execute(plan, {"x": "not an array", "b": inputs()["b"]})
