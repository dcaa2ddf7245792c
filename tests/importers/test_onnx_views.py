"""ONNX gives no strides: a Transpose whose output only pointwise nodes read is declared a view of its input, so
the plan runs no step for it; one a matmul reads stays a packed copy (the layout matmul builders take)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

from onnx import helper
from onnx_graphs import one_input_model

import sigdnn
from sigdnn.importers import onnx as onnx_import

X = np.random.default_rng(0).standard_normal((2, 3, 4, 5)).astype(np.float32)


def model(nodes: list, known: dict[str, np.ndarray]) -> bytes:
    return one_input_model(nodes, known, X.shape)


def steps(graph: sigdnn.Graph) -> dict[str, str]:
    plan = sigdnn.Executor().prepare(graph)
    return {s.node.op.kind: s.builder.name for s in plan.steps if s.node.op.kind in ("transpose", "reshape")}


def test_a_transpose_read_by_pointwise_nodes_is_a_view() -> None:
    """ConvNeXt's layout swap before its layer scale: relu, then the transposed values scaled (both pointwise)."""
    scale = np.arange(3, dtype=np.float32).reshape(1, 1, 1, 3)
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 2, 3, 1]),
        helper.make_node("Mul", ["t", "scale"], ["m"]),
        helper.make_node("Add", ["m", "t"], ["y"]),
    ]
    graph = onnx_import.load(model(nodes, {"scale": scale}))
    assert steps(graph) == {"transpose": "view"}
    t = np.maximum(X, 0).transpose(0, 2, 3, 1)
    np.testing.assert_array_equal(sigdnn.Executor().run(graph, {"x": X})["y"], t * scale + t)


def test_a_transpose_a_matmul_reads_stays_a_packed_copy() -> None:
    """ViT's k^T into q @ k^T: the matmul builders are written for packed operands."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[0, 1, 3, 2]),
        helper.make_node("Mul", ["t", "two"], ["m"]),
        helper.make_node("MatMul", ["r", "t"], ["y"]),
    ]
    graph = onnx_import.load(model(nodes, {"two": np.array(2.0, np.float32)}))
    transposed = next(t for t in graph.tensors.values() if "Transpose" in t.name)
    assert transposed.strides == (60, 20, 4, 1), transposed.strides  # packed: a matmul reads it
    assert steps(graph)["transpose"] != "view"
    r = np.maximum(X, 0)
    np.testing.assert_allclose(sigdnn.Executor().run(graph, {"x": X})["y"], r @ r.transpose(0, 1, 3, 2), rtol=1e-6)
