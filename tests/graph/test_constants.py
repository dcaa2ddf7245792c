"""Constant tensors (schema 1.2 ``Tensor.data``): built, checked, serialized, bound by the executor."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import sigdnn
from sigdnn.errors import GraphError, VariantPackError
from sigdnn.graph.checks import check_graph


def _graph(w: np.ndarray) -> sigdnn.Graph:
    g = sigdnn.Graph("const", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (2, 3))
    c = g.constant("w", w)
    g.pointwise("mul", x, c, name="mul").set_output(True).set_name("y")
    return g


def test_constant_round_trips_bit_for_bit_and_is_not_an_input() -> None:
    w = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    g = _graph(w)
    back = sigdnn.deserialize(g.serialize())
    assert back == g
    assert [t.name for t in back.inputs] == ["x"]
    np.testing.assert_array_equal(back.tensor_by_name("w").constant(), w)


@pytest.mark.parametrize(
    "dtype", [np.float16, ml_dtypes.bfloat16, np.float64, np.int8, np.int32, np.int64, np.bool_, np.uint8]
)
def test_every_dtype_keeps_its_bits(dtype: type) -> None:
    values = (np.arange(12).reshape(3, 4) % 5).astype(dtype)
    g = sigdnn.Graph("c")
    t = g.constant("c", values)
    back = sigdnn.deserialize(g.serialize(), check=False).tensors[t.uid]
    assert back.constant().tobytes() == values.tobytes()
    assert back.constant().dtype == values.dtype


def test_executor_binds_the_constant_and_the_pack_may_override_it() -> None:
    w = np.array([[1, 2, 3], [4, 5, 6]], dtype=np.float32)
    x = np.full((2, 3), 0.5, dtype=np.float32)
    ex = sigdnn.Executor()
    plan = ex.prepare(_graph(w).serialize())
    np.testing.assert_array_equal(ex.execute(plan, {"x": x})["y"], x * w)
    np.testing.assert_array_equal(ex.execute(plan, {"x": x, "w": -w})["y"], -x * w)
    with pytest.raises(VariantPackError, match="missing input"):
        ex.execute(plan, {})


def test_wrong_length_and_written_constants_are_graph_errors() -> None:
    g = _graph(np.ones((2, 3), np.float32))
    g.tensor_by_name("w").data = b"\0" * 5
    with pytest.raises(GraphError, match="constant data holds 5 bytes"):
        sigdnn.deserialize(g.serialize())
    g = _graph(np.ones((2, 3), np.float32))
    g.tensor_by_name("y").data = np.zeros((2, 3), np.float32).tobytes()
    with pytest.raises(GraphError, match="writes constant 'y'"):
        sigdnn.deserialize(g.serialize())


def test_a_constant_needs_an_array_of_a_sigdnn_dtype() -> None:
    g = sigdnn.Graph("c")
    with pytest.raises(GraphError, match="not a sigdnn data type"):
        g.constant("c", np.zeros(3, np.complex64))
    with pytest.raises(GraphError, match="expected a NumPy array"):
        g.constant("c", [1.0, 2.0])  # type: ignore[arg-type]


def test_validation_feeds_constants_to_the_reference() -> None:
    report = sigdnn.validate(_graph(np.full((2, 3), 1.5, np.float32)), backend="reference")
    assert report.passed


def test_a_constant_read_from_bytes_shares_them_and_any_other_array_is_copied() -> None:
    """A weight that is exactly a bytes object's contents (np.frombuffer; onnx's initializers) is kept as that
    object, since bytes cannot change (#32: ViT-B/16's 330 MB were copied once more); anything else is copied."""
    raw = np.arange(6, dtype="<f4").tobytes()
    g = sigdnn.Graph("c")
    shared = g.constant("shared", np.frombuffer(raw, "<f4").reshape(2, 3))
    assert shared.data is raw
    writable = np.arange(6, dtype=np.float32).reshape(2, 3)
    copied = g.constant("copied", writable)
    writable[0, 0] = 100
    assert copied.constant()[0, 0] == 0  # changing the array afterwards does not reach the graph
    views = {
        "part": np.frombuffer(raw, "<f4")[1:],  # a part of the bytes
        "strided": np.frombuffer(raw, "<f4")[::2],
        "transposed": np.frombuffer(raw, "<f4").reshape(2, 3).T,
        "big-endian": np.frombuffer(np.arange(6, dtype=">f4").tobytes(), ">f4"),
        "bytearray": np.frombuffer(bytearray(raw), "<f4"),  # mutable: copied
    }
    for name, values in views.items():
        t = g.constant(name, values)
        assert t.data is not raw, name
        assert t.data == np.ascontiguousarray(values, values.dtype.newbyteorder("<")).tobytes(), name
        np.testing.assert_array_equal(t.constant(), values, err_msg=name)
    as_int = g.constant("as int32", np.frombuffer(raw, "<i4"))  # the same bytes read as int32: shared too
    assert as_int.data is raw and as_int.dtype == sigdnn.DataType.INT32


@pytest.mark.parametrize("how", ["virtual", "pass-by-value", "no dtype"])
def test_a_constant_is_a_typed_tensor_of_its_own(how: str) -> None:
    """Constant data on a virtual or pass-by-value tensor, or with no dtype of its own (the graph default could
    change what its bytes mean), is refused by the graph's checks, naming the tensor."""
    g = _graph(np.ones((1, 1), np.float32))  # one element: a well-formed pass-by-value scalar apart from its data
    w = g.tensor_by_name("w")
    if how == "virtual":
        w.is_virtual = True
    elif how == "pass-by-value":
        w.value = np.float32(1.0).tobytes()
    else:
        w.dtype = None
    want = "a constant needs its own data type" if how == "no dtype" else "neither virtual nor pass-by-value"
    with pytest.raises(GraphError, match=f"tensor 'w'.*{want}"):
        check_graph(g)
