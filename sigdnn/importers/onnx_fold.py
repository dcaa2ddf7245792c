"""Pricing a node before it is computed at import time: its output size and its work, bounded first.

Folding runs onnx.reference, pure Python for many ops: a MaxPool over a
known 4096^2 input ran for hours, a broadcast Add of two small constants made
gigabytes. A node is folded only when what it makes is known beforehand:

- elementwise ops: the broadcast of their inputs' shapes;
- data movement (reshape, transpose, slice, gather, concat, ...): at most
  what their inputs hold (for Gather: indices times the gathered rows);
- ops whose output size their input values choose (ConstantOfShape, Expand,
  Tile, Range): computed from those values;
- anything else only on small inputs (``SMALL_FOLD`` elements in all),
  with ONNX's own shape inference naming the output size, and its work
  (outputs times a window's taps or a weight's size) at most ``MAX_FOLD_WORK``.

A MaxPool whose pads differ is not folded either: onnx.reference (1.23)
reads its pads in the wrong order. A node that cannot be priced is not folded (a handler maps it onto graph
nodes; ``FOLD_ONLY`` ops are refused). Every folded value counts against
``MAX_FOLDED_ELEMENTS`` and, with the others, against ``Limits.max_total_bytes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

MAX_FOLDED_ELEMENTS = 1 << 24  # one value computed at import time
MAX_RANK = 64  # NumPy's
SMALL_FOLD = 1 << 16  # inputs plus outputs of a node priced by shape inference
MAX_FOLD_WORK = 1 << 22  # element reads of such a node: outputs times the taps of its window or weight
ELEMENTWISE = frozenset(
    [
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
)
AT_MOST_INPUTS = frozenset(["Concat", "Flatten", "Reshape", "Slice", "Squeeze", "Transpose", "Unsqueeze"])


class Unpriced(Exception):
    """The node's output size is not known before computing it: do not fold it."""


def price(op: str, inputs: list[np.ndarray | None], attribute: Any, opset: int, proto: Any) -> int:
    """Elements the node's outputs hold together; Unpriced when that cannot be known cheaply.

    Raises ValueError / TypeError / OverflowError / IndexError for inputs that
    describe no valid output (the caller refuses the node).
    """
    present = [v for v in inputs if v is not None]
    if op in ELEMENTWISE:
        return _count(broadcast(*(v.shape for v in present)))
    if op in AT_MOST_INPUTS:
        return sum(v.size for v in present)
    if op == "Gather":
        data, indices = inputs[0], inputs[1]
        axis = int(attribute("axis", 0))
        rows = data.shape[axis]  # IndexError for an axis data lacks
        return indices.size * (data.size // rows if rows else 0)
    if op == "ConstantOfShape":
        return _count(int(d) for d in inputs[0].reshape(-1))
    if op == "Expand":
        return _count(broadcast(inputs[0].shape, tuple(int(d) for d in inputs[1].reshape(-1))))
    if op == "Tile":
        return inputs[0].size * _count(int(d) for d in inputs[1].reshape(-1))
    if op == "Range":
        start, limit, delta = (float(v.reshape(())) for v in inputs[:3])
        if not delta:
            raise ValueError("Range with delta 0")
        return max(0, int(np.ceil((limit - start) / delta)))
    if op == "MaxPool" and len(set(attribute("pads", None) or ())) > 1:
        raise Unpriced  # onnx.reference's MaxPool reads pads as (begin, end) per axis, not ONNX's begins-then-ends
    if sum(v.size for v in present) > SMALL_FOLD:
        raise Unpriced
    return _inferred(proto, inputs, opset)


def broadcast(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcast of shapes, in Python integers; ValueError past NumPy's 64 dims or for dims that clash.

    (np.broadcast_shapes stops at 32 arguments' worth of dims with a RuntimeError.)
    """
    rank = max((len(s) for s in shapes), default=0)
    if rank > MAX_RANK:
        raise ValueError(f"{rank} dims (NumPy holds at most {MAX_RANK})")
    out = []
    for axis in range(-rank, 0):
        dims = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(dims) > 1:
            raise ValueError(f"dims {sorted(dims)} do not broadcast")
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def _count(dims: Any) -> int:
    """Elements of a shape, as a Python int (no float64 or int64 overflow); negative dims are invalid."""
    count = 1
    for d in dims:
        d = int(d)
        if d < 0:
            raise ValueError(f"negative dim {d}")
        count *= d
    return count


def _inferred(proto: Any, inputs: list[np.ndarray | None], opset: int) -> int:
    """Output elements from ONNX shape inference on the node alone, its (small) inputs given as values."""
    import onnx
    from onnx import helper, numpy_helper

    initializers = [numpy_helper.from_array(v, name) for name, v in zip(proto.input, inputs) if name and v is not None]
    graph = helper.make_graph([proto], "price", [], [], initializer=initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception:  # inference cannot say: do not fold
        raise Unpriced from None
    shapes = {info.name: info.type.tensor_type.shape for info in inferred.graph.value_info}
    total = 0
    for name in proto.output:
        if not name:
            continue
        shape = shapes.get(name)
        if shape is None or not all(d.HasField("dim_value") for d in shape.dim):
            raise Unpriced
        total += _count(d.dim_value for d in shape.dim)
    if total > SMALL_FOLD or total * _taps(proto, inputs) > MAX_FOLD_WORK:
        raise Unpriced
    return total


def _taps(proto: Any, inputs: list[np.ndarray | None]) -> int:
    """Input elements each output element reads at most: a window's taps (its kernel_shape), or a weight's size."""
    for attribute in proto.attribute:
        if attribute.name == "kernel_shape":
            return max(1, _count(abs(k) for k in attribute.ints))
    if proto.op_type in ("Conv", "ConvTranspose", "ConvInteger", "QLinearConv") and len(inputs) > 1:
        weight = inputs[3 if proto.op_type == "QLinearConv" else 1]
        return max(1, weight.size) if weight is not None else 1
    return 1
