"""Whole models: a ResNet-18 and a 2-layer transformer encoder, exported from PyTorch, imported, run on the
reference and compared with onnxruntime (CPU) within a bound derived from the dtype and the reduction lengths."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx_models import encoder, export, resnet18  # noqa: E402

import sigdnn  # noqa: E402
from sigdnn.importers import onnx as onnx_import  # noqa: E402

EPS32 = float(np.finfo(np.float32).eps)


def accumulation_bound(graph: sigdnn.Graph, scale: float) -> float:
    """A first-order bound on float32 accumulated rounding: eps * (sum over nodes of their reduction length + 1) * scale.

    Each float32 dot product of length L in onnxruntime errs by at most about
    L * eps relative to the sum of |terms| (Higham); errors of successive
    layers add to first order. ``scale`` is the magnitude of the values.
    """
    total = 0
    for node in graph.nodes:
        tensors = {p: graph.tensors[u] for p, u in node.op.ports().items()}
        lengths = [node.op.reduction_length(tensors, p) for p in node.op.outputs()]
        total += max(lengths, default=1) + 1
    return EPS32 * total * scale


def run_both(data: bytes, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, sigdnn.Graph]:
    graph = onnx_import.load(data)
    ours = sigdnn.Executor().run(graph.serialize(), {"x": x})["y"]
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return ours, theirs, graph


def test_resnet18_matches_onnxruntime() -> None:
    x = np.random.default_rng(1).standard_normal((1, 3, 64, 64)).astype(np.float32)
    # batchnorm left unfolded so that BatchNormalization itself is imported
    data = export(resnet18(), torch.from_numpy(x), fold_constants=False)
    ours, theirs, graph = run_both(data, x)
    kinds = {n.kind for n in graph.nodes}
    assert {"conv_fprop", "batchnorm_inference", "pooling", "reduction", "matmul"} <= kinds
    assert ours.shape == theirs.shape == (1, 1000)
    bound = accumulation_bound(graph, float(np.abs(theirs).max()))
    assert np.abs(ours - theirs).max() <= bound
    assert bound < 0.05 * float(np.abs(theirs).max())  # the bound itself is tight enough to mean something


def test_transformer_encoder_matches_onnxruntime() -> None:
    x = np.random.default_rng(2).standard_normal((2, 10, 32)).astype(np.float32)
    data = export(encoder(), torch.from_numpy(x))
    ours, theirs, graph = run_both(data, x)
    kinds = {n.kind for n in graph.nodes}
    assert {"layernorm", "softmax", "matmul"} <= kinds
    assert ours.shape == theirs.shape == (2, 10, 32)
    assert np.abs(ours - theirs).max() <= accumulation_bound(graph, float(np.abs(theirs).max()))


def test_weights_travel_inside_the_sdg(tmp_path) -> None:
    x = np.random.default_rng(3).standard_normal((2, 10, 32)).astype(np.float32)
    data = export(encoder(), torch.from_numpy(x))
    path = tmp_path / "encoder.sdg"
    onnx_import.load(data).save(path)
    graph = sigdnn.load(path)
    assert [t.name for t in graph.inputs] == ["x"]
    assert sum(len(t.data) for t in graph.tensors.values() if t.data is not None) > 4 * 2 * (4 * 32 * 32)
    ours = sigdnn.Executor().run(path, {"x": x})["y"]
    theirs = ort.InferenceSession(data).run(None, {"x": x})[0]
    assert np.abs(ours - theirs).max() <= accumulation_bound(graph, float(np.abs(theirs).max()))
