"""Import-time folds are priced before they run (#32): counts worked by hand, each limit at its boundary.

The limits are written out here (2^16 elements for a node priced by shape
inference, 2^22 reads of work, 2^24 elements for one folded value), not read
from the module, so a changed limit fails these tests.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from sigdnn.errors import SigdnnError
from sigdnn.importers import onnx as onnx_importer
from sigdnn.importers.onnx_fold import Unpriced, broadcast, price

SMALL = 1 << 16

# ONNX's elementwise ops: priced by the broadcast of their inputs, whatever their size
ELEMENTWISE_OPS = [
    "Abs",
    "Acos",
    "Acosh",
    "Add",
    "And",
    "Asin",
    "Asinh",
    "Atan",
    "Atanh",
    "BitShift",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "Cast",
    "CastLike",
    "Ceil",
    "Clip",
    "Cos",
    "Cosh",
    "Div",
    "Elu",
    "Equal",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "IsInf",
    "IsNaN",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "Max",
    "Mean",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "Pow",
    "PRelu",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Sum",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Where",
    "Xor",
]
MOVEMENT_OPS = ["Concat", "Flatten", "Reshape", "Slice", "Squeeze", "Transpose", "Unsqueeze"]


def _no_attributes(name: str, default: Any = None) -> Any:
    return default


def _attributes(**values: Any) -> Any:
    return lambda name, default=None: values.get(name, default)


def _inferred(op: str, inputs: dict[str, np.ndarray], outputs: list[str], **attributes: Any) -> int:
    """price() of a node priced by ONNX shape inference (opset 17), its inputs given as values."""
    node = helper.make_node(op, list(inputs), outputs, **attributes)
    return price(op, list(inputs.values()), _no_attributes, 17, node)


@pytest.mark.parametrize("op", ELEMENTWISE_OPS)
def test_an_elementwise_op_is_priced_by_its_broadcast_whatever_its_inputs_size(op: str) -> None:
    big = np.zeros((SMALL, 1), np.float32)  # past what shape inference is trusted with
    count = price(op, [big, np.zeros((1, 2), np.float32)], _no_attributes, 17, None)
    assert count == 2 * SMALL and type(count) is int


def test_omitted_inputs_are_left_out_of_the_broadcast() -> None:
    x, high = np.zeros((3, 1), np.float32), np.zeros((1, 4), np.float32)
    assert price("Clip", [x, None, high], _no_attributes, 17, None) == 12  # Clip(x, min omitted, max)


@pytest.mark.parametrize("op", MOVEMENT_OPS)
def test_data_movement_is_priced_at_what_its_inputs_hold(op: str) -> None:
    count = price(op, [np.zeros(SMALL + 5, np.float32), np.array([2], np.int64)], _no_attributes, 17, None)
    assert count == SMALL + 6 and type(count) is int


def test_gather_is_priced_as_indices_times_the_gathered_rows() -> None:
    data, indices = np.zeros((5, 3), np.float32), np.zeros((2, 2), np.int64)
    assert price("Gather", [data, indices], _no_attributes, 17, None) == 4 * 3  # axis 0 by default: rows of 3
    count = price("Gather", [data, indices], _attributes(axis=1), 17, None)
    assert count == 4 * 5 and type(count) is int  # axis 1: columns of 5
    assert price("Gather", [np.zeros((0, 3), np.float32), indices], _no_attributes, 17, None) == 0
    with pytest.raises(IndexError):
        price("Gather", [data, indices], _attributes(axis=2), 17, None)


def test_ops_whose_values_choose_their_size_are_priced_from_those_values() -> None:
    shape = np.array([2, 3, 4], np.int64)
    assert price("ConstantOfShape", [shape], _no_attributes, 17, None) == 24
    assert price("ConstantOfShape", [np.array([5, 0], np.int64)], _no_attributes, 17, None) == 0
    assert price("Expand", [np.zeros((3, 1), np.float32), shape], _no_attributes, 17, None) == 24
    assert price("Tile", [np.zeros((2, 3), np.float32), np.array([2, 5], np.int64)], _no_attributes, 17, None) == 60
    for op, inputs in [
        ("ConstantOfShape", [np.array([2, -3], np.int64)]),
        ("Expand", [np.zeros((3, 1), np.float32), np.array([2, 4, 4], np.int64)]),
        ("Tile", [np.zeros(2, np.float32), np.array([-1], np.int64)]),
    ]:
        with pytest.raises(ValueError):
            price(op, inputs, _no_attributes, 17, None)


@pytest.mark.parametrize(
    ("start", "limit", "delta", "count"),
    [(1, 10, 3, 3), (1, 11, 3, 4), (10, 1, -2, 5), (5, 1, 1, 0), (1.0, 1.5, 0.25, 2)],
)
def test_range_is_priced_from_its_bounds(start: float, limit: float, delta: float, count: int) -> None:
    inputs = [np.array(v) for v in (start, limit, delta)]
    assert price("Range", inputs, _no_attributes, 17, None) == count


def test_a_range_with_delta_zero_describes_no_output() -> None:
    with pytest.raises(ValueError, match="delta 0"):
        price("Range", [np.array(0), np.array(4), np.array(0)], _no_attributes, 17, None)
    nodes = [
        helper.make_node("Constant", [], [n], value=numpy_helper.from_array(np.array(v, np.int64), n))
        for n, v in (("a", 0), ("b", 4), ("d", 0))
    ]
    nodes += [helper.make_node("Range", ["a", "b", "d"], ["r"]), helper.make_node("Cast", ["r"], ["y"], to=1)]
    graph = helper.make_graph(nodes, "range", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None])])
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    with pytest.raises(SigdnnError, match=r"\(Range\): its inputs do not describe a valid output shape"):
        onnx_importer.load(data)


def test_broadcast_follows_numpy() -> None:
    assert broadcast((2, 3), (3,)) == (2, 3)
    assert broadcast((2, 1), (1, 3)) == (2, 3)
    assert broadcast((2, 3), (2, 3)) == (2, 3)
    assert broadcast((1,), (1, 1)) == (1, 1)
    assert broadcast((4, 1, 5), (1, 0, 1)) == (4, 0, 5)
    assert broadcast() == ()
    with pytest.raises(ValueError, match=r"dims \[2, 3\] do not broadcast"):
        broadcast((2,), (3,))
    assert broadcast((1,) * 64) == (1,) * 64
    with pytest.raises(ValueError, match="65 dims"):
        broadcast((1,) * 65, (1,))


def test_inputs_up_to_the_small_fold_bound_are_priced_by_shape_inference() -> None:
    assert _inferred("ReduceMax", {"x": np.zeros((256, 256), np.float32)}, ["y"], axes=[1], keepdims=0) == 256
    with pytest.raises(Unpriced):
        _inferred("ReduceMax", {"x": np.zeros(SMALL + 1, np.float32)}, ["y"], keepdims=0)


def test_outputs_up_to_the_small_fold_bound_are_priced_by_shape_inference() -> None:
    def pad_to(n: int) -> int:
        return _inferred("Pad", {"x": np.zeros(1, np.float32), "p": np.array([0, n - 1], np.int64)}, ["y"])

    count = pad_to(SMALL)
    assert count == SMALL and type(count) is int
    with pytest.raises(Unpriced):
        pad_to(SMALL + 1)


def test_a_windowed_fold_is_priced_by_its_outputs_times_its_taps() -> None:
    # 64 x 64 outputs of a 32 x 32 window: 2^22 reads, the bound
    assert _inferred("MaxPool", {"x": np.zeros((1, 1, 95, 95), np.float32)}, ["y"], kernel_shape=[32, 32]) == 4096
    with pytest.raises(Unpriced):  # 64 x 64 outputs of a 32 x 33 window: 4325376 reads
        _inferred("MaxPool", {"x": np.zeros((1, 1, 95, 96), np.float32)}, ["y"], kernel_shape=[32, 33])


def _conv_inputs(op: str) -> dict[str, np.ndarray]:
    """16 x 16 images of 16 channels into 64: 16384 outputs, each reading a 16 x 3 x 3 weight (2.4e8 reads)."""
    dtype = np.uint8 if op in ("ConvInteger", "QLinearConv") else np.float32
    x, w = np.zeros((1, 16, 16, 16), dtype), np.zeros((64, 16, 3, 3), dtype)
    if op == "ConvTranspose":
        w = np.zeros((16, 64, 3, 3), dtype)
    if op != "QLinearConv":
        return {"x": x, "w": w}
    scale, zero = np.array(1.0, np.float32), np.array(0, np.uint8)
    return {"x": x, "xs": scale, "xz": zero, "w": w, "ws": scale, "wz": zero, "ys": scale, "yz": zero}


@pytest.mark.parametrize("op", ["Conv", "ConvTranspose", "ConvInteger", "QLinearConv"])
def test_a_convolution_is_priced_by_its_weight(op: str) -> None:
    inputs = _conv_inputs(op)
    with pytest.raises(Unpriced):
        _inferred(op, inputs, ["y"], pads=[1, 1, 1, 1])
    # the same convolution at one output channel: 256 outputs of 144 reads each
    inputs["w"] = inputs["w"][:1] if op != "ConvTranspose" else inputs["w"][:, :1]
    assert _inferred(op, inputs, ["y"], pads=[1, 1, 1, 1]) == 256


def test_a_matmul_reads_no_window() -> None:
    """MatMul is NumPy's own loop, not one in Python: its size alone prices it."""
    inputs = {"a": np.zeros((1, 128), np.float32), "b": np.zeros((128, 256), np.float32)}
    assert _inferred("MatMul", inputs, ["y"]) == 256


def test_every_named_output_counts_and_omitted_ones_do_not() -> None:
    inputs = {"x": np.zeros(5, np.float32), "k": np.array([2], np.int64)}
    assert _inferred("TopK", inputs, ["v", "i"]) == 4
    assert _inferred("TopK", inputs, ["", "i"]) == 2


def test_outputs_whose_size_inference_cannot_name_are_unpriced() -> None:
    with pytest.raises(Unpriced):  # NonZero: how many is in the values
        _inferred("NonZero", {"x": np.ones((2, 3), np.float32)}, ["y"])
    with pytest.raises(Unpriced):  # inference refuses: MaxPool of a 1-D input
        _inferred("MaxPool", {"x": np.zeros(4, np.float32)}, ["y"], kernel_shape=[2])


def _constant_of_shape_model(count: int) -> bytes:
    nodes = [
        helper.make_node("Constant", [], ["s"], value=numpy_helper.from_array(np.array([count], np.int64), "s")),
        helper.make_node("ConstantOfShape", ["s"], ["c"]),
        helper.make_node("Add", ["x", "c"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [count])
    graph = helper.make_graph(nodes, "cos", [x], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [count])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_one_folded_value_is_bounded_at_2_to_the_24_elements() -> None:
    with pytest.raises(SigdnnError, match=r"would make 16777217 elements \(limit 16777216\)"):
        onnx_importer.load(_constant_of_shape_model((1 << 24) + 1))
    assert onnx_importer.load(_constant_of_shape_model(4)).nodes


def _pool_of_a_constant(kernel: list[int]) -> bytes:
    """y = x + MaxPool(constant image), the image sized for 64 x 64 outputs of the window."""
    image = numpy_helper.from_array(np.zeros((1, 1, 63 + kernel[0], 63 + kernel[1]), np.float32), "img")
    nodes = [
        helper.make_node("MaxPool", ["img"], ["p"], kernel_shape=kernel),
        helper.make_node("Add", ["x", "p"], ["y"]),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 64, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 64, 64])
    graph = helper.make_graph(nodes, "pool", [x], [y], initializer=[image])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def test_an_unpriced_op_is_left_as_a_graph_node() -> None:
    """A MaxPool of a constant whose window reads past the work bound runs in the executor, not at import."""
    assert "pooling" in [n.op.kind for n in onnx_importer.load(_pool_of_a_constant([32, 33])).nodes]
    folded = onnx_importer.load(_pool_of_a_constant([32, 32]))  # 2^22 reads: folded at import time
    assert "pooling" not in [n.op.kind for n in folded.nodes]


def test_a_maxpool_with_unequal_pads_is_left_to_the_graph() -> None:
    """onnx.reference (1.23) pads a MaxPool's axes by (begin 1, begin 2), (end 1, end 2): a 7 x 8 image padded
    at the start of its width came out 7 x 7, not 6 x 8."""
    image = np.arange(56, dtype=np.float32).reshape(1, 1, 7, 8)
    even = helper.make_node("MaxPool", ["img"], ["p"], kernel_shape=[2, 2], pads=[1, 1, 1, 1])
    assert price("MaxPool", [image], _attributes(pads=(1, 1, 1, 1)), 17, even) == 8 * 9
    unpadded = helper.make_node("MaxPool", ["img"], ["p"], kernel_shape=[2, 2])
    assert price("MaxPool", [image], _no_attributes, 17, unpadded) == 6 * 7
    node = helper.make_node("MaxPool", ["img"], ["p"], kernel_shape=[2, 2], pads=[0, 1, 0, 0])
    with pytest.raises(Unpriced):
        price("MaxPool", [image], _attributes(pads=(0, 1, 0, 0)), 17, node)
    nodes = [node, helper.make_node("Add", ["x", "p"], ["y"])]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 6, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 6, 8])
    graph = helper.make_graph(nodes, "pool", [x], [y], initializer=[numpy_helper.from_array(image, "img")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    pooled = [n for n in onnx_importer.load(model.SerializeToString()).nodes if n.op.kind == "pooling"]
    assert len(pooled) == 1
