"""HardSigmoid and HardSwish (mobilenet_v3's activations) import as pointwise modes (#32), checked against
onnxruntime and a float64 formula on values around both kinks."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import sigdnn
from sigdnn.importers import onnx as onnx_importer

ort = pytest.importorskip("onnxruntime")


def model(op: str, **attributes: float) -> bytes:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attributes)],
        op,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 64])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def inputs() -> np.ndarray:
    kinks = np.array([-3, 3, -2.5, 2.5, 0, -0.5, 0.5], np.float32)
    near = (kinks[:, None] + np.array([-1e-3, 0, 1e-3], np.float32)).ravel()
    rng = np.random.default_rng(0)
    return np.concatenate([near, rng.uniform(-6, 6, 256 - near.size).astype(np.float32)]).reshape(4, 64)


@pytest.mark.parametrize(
    ("op", "attributes", "formula"),
    [
        ("HardSigmoid", {}, lambda x: np.clip(0.2 * x + 0.5, 0, 1)),
        ("HardSigmoid", {"alpha": 0.5, "beta": 0.25}, lambda x: np.clip(0.5 * x + 0.25, 0, 1)),
        ("HardSwish", {}, lambda x: x * np.clip(x / 6 + 0.5, 0, 1)),
    ],
)
def test_hard_activations_match_onnxruntime_and_the_formula(op: str, attributes: dict, formula) -> None:
    data, x = model(op, **attributes), inputs()
    graph = onnx_importer.load(data)
    ours = sigdnn.Executor().run(graph.serialize(), {"x": x})["y"]
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    want = formula(x.astype(np.float64))
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ours, want, rtol=1e-6, atol=1e-7)
    assert {n.op.mode for n in graph.nodes} <= {"mul", "add", "relu_fwd"}
