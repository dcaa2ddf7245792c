"""MatMul and Gemm -> sigdnn matmul (+ transposes, scaling and the bias add as pointwise nodes)."""

from __future__ import annotations

import numpy as np

from sigdnn.importers.onnx_node import OnnxNode, Value, onnx_op


def matmul(node: OnnxNode, a: Value, b: Value) -> Value:
    """NumPy matmul semantics: 1-D operands get a unit dim that is dropped again, batch dims broadcast."""
    a_dims = tuple(a.shape) if isinstance(a, np.ndarray) else a.dims
    b_dims = tuple(b.shape) if isinstance(b, np.ndarray) else b.dims
    if len(a_dims) == 1:
        a = node.reshape(a, (1, *a_dims), "a_as_row")
    if len(b_dims) == 1:
        b = node.reshape(b, (*b_dims, 1), "b_as_column")
    c = node.graph.matmul(node.materialize(a, "a"), node.materialize(b, "b"), name=node.fresh("matmul"))
    dims = c.dims
    if len(a_dims) == 1:
        dims = (*dims[:-2], dims[-1])
    if len(b_dims) == 1:
        dims = dims[:-1]
    return node.reshape(c, dims, "squeeze") if dims != c.dims else c


@onnx_op("MatMul")
def onnx_matmul(node: OnnxNode) -> list[Value]:
    return [matmul(node, node.value(0), node.value(1))]


@onnx_op("Gemm")
def gemm(node: OnnxNode) -> list[Value]:
    """Y = alpha * A' B' + beta * C; a known transposed weight is transposed at import time."""
    a, b = node.value(0), node.value(1)
    if node.attr("transA", 0):
        a = node.transpose(a, (1, 0), "a_t")
    if node.attr("transB", 0):
        b = node.transpose(b, (1, 0), "b_t")
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    y = matmul(node, a, b)
    dtype = node.dtype(0).numpy
    if alpha != 1.0:
        y = node.pointwise("mul", y, np.array(alpha, dtype=dtype), what="alpha")
    if node.has(2) and beta != 0.0:
        c = node.value(2)
        if beta != 1.0:
            c = (
                c * np.array(beta, dtype=dtype)
                if isinstance(c, np.ndarray)
                else node.pointwise("mul", c, np.array(beta, dtype=dtype), what="beta")
            )
        y = node.pointwise("add", y, c, what="bias")
    return [y]
