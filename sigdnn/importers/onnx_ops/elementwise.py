"""Elementwise ONNX ops and activations -> sigdnn pointwise modes (docs/ops.md has each mode's formula)."""

from __future__ import annotations

import numpy as np

from sigdnn.dtypes import DataType, as_data_type
from sigdnn.graph.tensor import Tensor
from sigdnn.importers.onnx_node import OnnxNode, Value, onnx_dtype, onnx_op

BINARY = {
    "Add": "add",
    "Sub": "sub",
    "Mul": "mul",
    "Div": "div",
    "Pow": "pow",
    "Equal": "cmp_eq",
    "Greater": "cmp_gt",
    "Less": "cmp_lt",
    "GreaterOrEqual": "cmp_ge",
    "LessOrEqual": "cmp_le",
    "And": "logical_and",
    "Or": "logical_or",
}
UNARY = {
    "Abs": "abs",
    "Neg": "neg",
    "Ceil": "ceil",
    "Floor": "floor",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
    "Exp": "exp",
    "Log": "log",
    "Sin": "sin",
    "Cos": "cos",
    "Tan": "tan",
    "Erf": "erf",
    "Not": "logical_not",
    "Relu": "relu_fwd",
    "Tanh": "tanh_fwd",
    "Sigmoid": "sigmoid_fwd",
    "Softplus": "softplus_fwd",
}
VARIADIC = {"Max": "max", "Min": "min", "Sum": "add"}


@onnx_op(*BINARY)
def binary(node: OnnxNode) -> list[Value]:
    return [node.pointwise(BINARY[node.op_type], node.value(0), node.value(1))]


@onnx_op(*UNARY)
def unary(node: OnnxNode) -> list[Value]:
    return [node.pointwise(UNARY[node.op_type], node.value(0))]


@onnx_op(*VARIADIC, "Mean")
def variadic(node: OnnxNode) -> list[Value]:
    """Max / Min / Sum / Mean of any number of inputs, folded left to right."""
    mode = VARIADIC.get(node.op_type, "add")
    values = [node.value(i) for i in range(len(node.proto.input)) if node.has(i)]
    out = values[0]
    for i, v in enumerate(values[1:]):
        out = node.pointwise(mode, out, v, what=f"{mode}{i}")
    if node.op_type == "Mean":
        count = np.array(len(values), dtype=node.dtype(0).numpy)
        out = node.pointwise("div", out, count, what="mean")
    elif len(values) == 1:
        out = node.pointwise("identity", out)
    return [out]


@onnx_op("Mod")
def mod(node: OnnxNode) -> list[Value]:
    if node.attr("fmod", 0) != 1:
        raise node.refuse("Mod with fmod=0 (the divisor's sign, as Python's %) has no sigdnn mode; only fmod=1")
    return [node.pointwise("mod", node.value(0), node.value(1))]


@onnx_op("Where")
def where(node: OnnxNode) -> list[Value]:
    return [node.pointwise("binary_select", node.value(1), node.value(2), node.value(0))]


@onnx_op("LeakyRelu")
def leaky_relu(node: OnnxNode) -> list[Value]:
    return [node.pointwise("relu_fwd", node.value(0), relu_lower_clip_slope=float(node.attr("alpha", 0.01)))]


@onnx_op("Elu")
def elu(node: OnnxNode) -> list[Value]:
    return [node.pointwise("elu_fwd", node.value(0), elu_alpha=float(node.attr("alpha", 1.0)))]


@onnx_op("Gelu")
def gelu(node: OnnxNode) -> list[Value]:
    approximate = node.attr("approximate", "none")
    modes = {"none": "gelu_fwd", "tanh": "gelu_approx_tanh_fwd"}
    if approximate not in modes:
        raise node.refuse(f"approximate={approximate!r} is neither 'none' nor 'tanh'")
    return [node.pointwise(modes[approximate], node.value(0))]


@onnx_op("Clip")
def clip(node: OnnxNode) -> list[Value]:
    """min(max(x, lo), hi) is relu_fwd with lower_clip lo, upper_clip hi and slope 0 (absent bounds: +-max float)."""
    if node.dtype(0).is_integer:
        raise node.refuse("Clip of integers has no sigdnn mode")
    big = float(np.finfo(np.float64).max)
    lo = float(node.const(1, "min").reshape(())) if node.has(1) else -big
    hi = float(node.const(2, "max").reshape(())) if node.has(2) else big
    lo = min(lo, hi)  # min(max(x, lo), hi) is hi everywhere when lo > hi
    return [node.pointwise("relu_fwd", node.value(0), relu_lower_clip=lo, relu_upper_clip=hi)]


@onnx_op("Identity", "Dropout")
def identity(node: OnnxNode) -> list[Value]:
    """The value itself (Dropout at inference: no mask output, ratio ignored only when training_mode is off)."""
    if node.op_type == "Dropout":
        node.attr("seed")
        if node.has(2) and bool(node.const(2, "training_mode").reshape(())):
            raise node.refuse("training-mode Dropout is random; sigdnn maps inference only")
        if len(node.proto.output) > 1 and node.proto.output[1]:
            raise node.refuse("the mask output of Dropout is not produced")
    return [node.value(0)]


def _cast(node: OnnxNode, to: DataType) -> list[Value]:
    """A rounding to ``to``; to float8, ONNX's default saturate=1 clamps overflow, which sigdnn's rounding does not."""
    v = node.value(0)
    saturate = node.attr("saturate", 1)
    if to in (DataType.FP8_E4M3, DataType.FP8_E5M2) and saturate:
        raise node.refuse(
            "saturate=1 (clamp overflow to the largest float8) is not supported; sigdnn rounds to inf/NaN"
        )
    if isinstance(v, np.ndarray):
        return [v.astype(to.numpy)]
    out: Tensor = node.pointwise("identity", v)
    out.set_data_type(to)
    return [out]


@onnx_op("Cast")
def cast(node: OnnxNode) -> list[Value]:
    return _cast(node, onnx_dtype(int(node.attr("to")), node.where))


@onnx_op("CastLike")
def cast_like(node: OnnxNode) -> list[Value]:
    return _cast(node, as_data_type(node.dtype(1).numpy))


def _hard_sigmoid(node: OnnxNode, x: Value, alpha: float, beta: float) -> Tensor:
    """max(0, min(1, alpha x + beta)): a multiply and an add, then relu_fwd clipped to [0, 1]."""
    dtype = node.dtype(0).numpy
    scaled = node.pointwise("mul", x, np.array(alpha, dtype=dtype), what="hard_sigmoid_scale")
    shifted = node.pointwise("add", scaled, np.array(beta, dtype=dtype), what="hard_sigmoid_shift")
    return node.pointwise("relu_fwd", shifted, what="hard_sigmoid", relu_lower_clip=0.0, relu_upper_clip=1.0)


@onnx_op("HardSigmoid")
def hard_sigmoid(node: OnnxNode) -> list[Value]:
    if not node.dtype(0).is_float:
        raise node.refuse("HardSigmoid of integers is not an ONNX op")
    return [_hard_sigmoid(node, node.value(0), float(node.attr("alpha", 0.2)), float(node.attr("beta", 0.5)))]


@onnx_op("HardSwish")
def hard_swish(node: OnnxNode) -> list[Value]:
    """x * HardSigmoid(x) with alpha 1/6 and beta 1/2 (ONNX's definition)."""
    if not node.dtype(0).is_float:
        raise node.refuse("HardSwish of integers is not an ONNX op")
    x = node.value(0)
    return [node.pointwise("mul", x, _hard_sigmoid(node, x, 1 / 6, 0.5), what="hard_swish")]


@onnx_op("Trilu")
def trilu(node: OnnxNode) -> list[Value]:
    """The upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims, zero elsewhere: column and row
    indices by gen_index, their difference compared with k, and a binary_select of x or 0."""
    x = node.value(0)
    dims = node.dims(0)
    if len(dims) < 2:
        raise node.refuse(f"input of rank {len(dims)}; Trilu needs rank >= 2")
    k = int(node.const(1, "k").reshape(())) if node.has(1) else 0
    upper = node.attr("upper", 1)
    if upper not in (0, 1):
        raise node.refuse(f"upper={upper!r} is neither 0 nor 1")
    rows = node.pointwise("gen_index", x, what="trilu_row", axis=len(dims) - 2).set_data_type(DataType.INT32)
    cols = node.pointwise("gen_index", x, what="trilu_col", axis=len(dims) - 1).set_data_type(DataType.INT32)
    offset = node.pointwise("sub", cols, rows, what="trilu_offset").set_data_type(DataType.INT32)
    bound = np.array(k, dtype=np.int32)
    keep = node.pointwise("cmp_ge" if upper else "cmp_le", offset, bound, what="trilu_keep").set_data_type(
        DataType.BOOL
    )
    zero = np.zeros((1,) * len(dims), dtype=node.dtype(0).numpy)
    return [node.pointwise("binary_select", x, zero, keep, what="trilu")]
