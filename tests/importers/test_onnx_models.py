"""Whole models: a ResNet-18 and a 2-layer transformer encoder, exported from PyTorch, imported, run on the
reference and compared with onnxruntime (CPU) within a bound derived from the dtype and the reduction lengths."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")

from onnx_models import (  # noqa: E402
    CausalSelfAttention,
    encoder,
    export,
    export_dynamic,
    mobilenet_v3_small_like,
    resnet18,
)

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


def test_a_mobilenet_v3_small_like_model_with_hardswish_and_hardsigmoid_matches_onnxruntime() -> None:
    """Exported as torch exports mobilenet_v3_small: HardSwish and HardSigmoid nodes, refused before #32."""
    x = np.random.default_rng(4).standard_normal((2, 3, 64, 64)).astype(np.float32)
    data = export(mobilenet_v3_small_like(), torch.from_numpy(x), opset=17)
    exported = {n.op_type for n in __import__("onnx").load_from_string(data).graph.node}
    assert {"HardSwish", "HardSigmoid"} <= exported
    ours, theirs, graph = run_both(data, x)
    assert ours.shape == theirs.shape == (2, 100)
    assert np.abs(ours - theirs).max() <= accumulation_bound(graph, float(np.abs(theirs).max()))


@pytest.mark.parametrize(
    ("op", "alpha", "beta"), [("HardSigmoid", 0.2, 0.5), ("HardSigmoid", 0.7, -0.1), ("HardSwish", None, None)]
)
def test_hard_activations_agree_with_onnxruntime_to_float32_rounding(op: str, alpha, beta) -> None:
    """Each side rounds alpha x and + beta in float32 (ours: float64 rounded once per node; onnxruntime may fuse)."""
    import onnx
    from onnx import TensorProto, helper

    attributes = {} if alpha is None else {"alpha": alpha, "beta": beta}
    node = helper.make_node(op, ["x"], ["y"], **attributes)
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 200])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 200])
    model = helper.make_model(
        helper.make_graph([node], "hard", [x_info], [y_info]), opset_imports=[helper.make_opsetid("", 17)]
    )
    data = model.SerializeToString()
    x = np.linspace(-8, 8, 600, dtype=np.float32).reshape(3, 200)
    x[0, :4] = [-0.0, 0.0, 2.5, -2.5]  # the clip's corners for the default alpha and beta
    ours = sigdnn.Executor().run(onnx_import.load(data), {"x": x})["y"]
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(ours, theirs, rtol=2 * EPS32, atol=0)
    assert onnx.checker.check_model(model) is None


def test_initializers_keep_their_onnx_names_and_a_weight_is_overridden_by_it() -> None:
    """The graph's constants are named as the model's initializers; a variant pack entry of that name replaces the
    weight, and the run agrees with onnxruntime on the model with that initializer replaced."""
    import onnx
    from onnx import numpy_helper

    x = np.random.default_rng(5).standard_normal((2, 3, 64, 64)).astype(np.float32)
    data = export(mobilenet_v3_small_like(), torch.from_numpy(x), opset=17)
    model = onnx.load_from_string(data)
    graph = onnx_import.load(data)
    constants = {t.name for t in graph.tensors.values() if t.is_constant}
    conv_weights = [n.input[1] for n in model.graph.node if n.op_type == "Conv"]
    assert conv_weights and set(conv_weights) <= constants  # e.g. 'onnx::Conv_123' as torch names them
    name = conv_weights[-1]  # the last block's projection: nothing after it but the head
    (init,) = [t for t in model.graph.initializer if t.name == name]
    replaced = np.random.default_rng(6).standard_normal(numpy_helper.to_array(init).shape).astype(np.float32)
    ours = sigdnn.Executor().run(graph.serialize(), {"x": x, name: replaced})["y"]
    init.CopyFrom(numpy_helper.from_array(replaced, name))
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    default = sigdnn.Executor().run(graph.serialize(), {"x": x})["y"]
    assert np.abs(ours - theirs).max() <= accumulation_bound(graph, float(np.abs(theirs).max()))
    assert np.abs(default - theirs).max() > 10 * accumulation_bound(graph, float(np.abs(theirs).max()))


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-3, -1, 0, 2, 9])
def test_trilu_of_a_runtime_tensor_matches_onnxruntime(upper: int, k: int) -> None:
    from onnx import TensorProto, helper

    node = helper.make_node("Trilu", ["x", "k"], ["y"], upper=upper)
    graph = helper.make_graph(
        [node],
        "trilu",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5, 7])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5, 7])],
        [helper.make_tensor("k", TensorProto.INT64, [], [k])],
    )
    data = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = np.random.default_rng(7).standard_normal((2, 5, 7)).astype(np.float32)
    imported = onnx_import.load(data)
    assert "binary_select" in {getattr(n.op, "mode", None) for n in imported.nodes}  # lowered, not folded
    ours = sigdnn.Executor().run(imported, {"x": x})["y"]
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_array_equal(ours, theirs)


def test_a_causal_block_exported_with_a_dynamic_sequence_matches_onnxruntime() -> None:
    """torch writes the causal mask as ConstantOfShape -> Trilu; imported with --input-shape's dims fixed."""
    import onnx

    x = np.random.default_rng(8).standard_normal((2, 9, 16)).astype(np.float32)
    data = export_dynamic(CausalSelfAttention(), torch.from_numpy(x), {0: "batch", 1: "sequence"})
    assert "Trilu" in {n.op_type for n in onnx.load_from_string(data).graph.node}
    graph = onnx_import.load(data, input_shapes={"x": (2, 9, 16)})
    ours = sigdnn.Executor().run(graph.serialize(), {"x": x})["y"]
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert np.abs(ours - theirs).max() <= accumulation_bound(graph, float(np.abs(theirs).max()))


def _attention_model(mask: np.ndarray, shape: list[int]) -> bytes:
    from onnx import TensorProto, helper, numpy_helper

    graph = helper.make_graph(
        [helper.make_node("Attention", ["q", "k", "v", "mask"], ["y"])],
        "attention",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in "qkv"],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(mask, "mask")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]).SerializeToString()


S = 6
CAUSAL_MASKS = {
    "float -inf above the diagonal (torch.triu)": np.triu(np.full((S, S), -np.inf, np.float32), 1),
    "bool lower triangle": np.tril(np.ones((S, S), bool)),
    "per batch, the same": np.broadcast_to(np.triu(np.full((S, S), -np.inf, np.float32), 1), (2, 1, S, S)).copy(),
}
OTHER_MASKS = {
    "one diagonal further": np.triu(np.full((S, S), -np.inf, np.float32), 2),
    "bottom-right aligned bool": np.tril(np.ones((S, S), bool))[::-1, ::-1].copy(),
    "a finite penalty": np.triu(np.full((S, S), -1e4, np.float32), 1),
}


@pytest.mark.parametrize(("name", "causal"), [(n, True) for n in CAUSAL_MASKS] + [(n, False) for n in OTHER_MASKS])
def test_a_causal_mask_feeding_attention_becomes_use_causal_mask(name: str, causal: bool) -> None:
    """The exporter's mask (torch.triu of -inf, or its boolean form) is sdpa's use_causal_mask, no bias read; any
    other mask stays a bias. Both agree with onnxruntime."""
    mask = (CAUSAL_MASKS | OTHER_MASKS)[name]
    shape = [2, 3, S, 8]
    data = _attention_model(mask, shape)
    graph = onnx_import.load(data)
    (sdpa,) = [n for n in graph.nodes if n.kind == "sdpa"]
    assert sdpa.op.use_causal_mask is causal and (sdpa.op.bias is None) is causal
    rng = np.random.default_rng(9)
    inputs = {n: rng.standard_normal(shape).astype(np.float32) for n in "qkv"}
    ours = sigdnn.Executor().run(graph, inputs)["y"]
    theirs = ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    assert np.abs(ours - theirs).max() <= 64 * EPS32 * float(np.abs(theirs).max())
