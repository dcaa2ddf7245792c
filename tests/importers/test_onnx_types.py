"""The importer's element types come from ONNX inference run on the model without its large weights (#32: for
ViT-B/16 inference serialized its 330 MB of weights three times, most of an import); the types are the same."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from sigdnn.dtypes import DataType  # noqa: E402
from sigdnn.importers.onnx_node import onnx_dtype  # noqa: E402
from sigdnn.importers.onnx_types import MAX_KEPT_ELEMENTS, inferred_dtypes, without_weights  # noqa: E402


def mixed_model(ir_version: int = 8, weights_as_inputs: bool = False) -> onnx.ModelProto:
    """x (float16) @ a large float16 weight, cast to float64, reshaped by a small shape initializer, plus a large
    float64 bias: each output type follows from an initializer's type."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 32)).astype(np.float16), "w")
    bias = numpy_helper.from_array(rng.standard_normal((2048,)).astype(np.float64), "bias")
    shape = numpy_helper.from_array(np.array([2048], np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Cast", ["h"], ["c"], to=TensorProto.DOUBLE),
        helper.make_node("Reshape", ["c", "shape"], ["r"]),
        helper.make_node("Add", ["r", "bias"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT16, [64, 64])]
    if weights_as_inputs:  # IR 3 models list their initializers among the inputs
        inputs += [
            helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in (w, bias, shape)
        ]  # fmt: skip
    graph = helper.make_graph(
        nodes, "mixed", inputs, [helper.make_tensor_value_info("y", TensorProto.UNDEFINED, None)],
        initializer=[w, bias, shape],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = ir_version
    return model


@pytest.mark.parametrize("weights_as_inputs", [False, True])
def test_types_are_those_of_inference_on_the_whole_model(weights_as_inputs: bool) -> None:
    model = mixed_model(weights_as_inputs=weights_as_inputs)
    whole = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    expected = {
        info.name: onnx_dtype(info.type.tensor_type.elem_type, info.name)
        for info in (*whole.graph.value_info, *whole.graph.output, *whole.graph.input)
        if info.type.tensor_type.elem_type
    }
    found = inferred_dtypes(onnx, model)
    assert found == expected
    assert found["h"] == DataType.FLOAT16 and found["c"] == found["y"] == DataType.FLOAT64
    assert ("w" in found) == weights_as_inputs  # a weight is typed only where the model declares it an input


def test_inference_never_sees_the_large_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real = onnx.shape_inference.infer_shapes
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda m, **kw: seen.append(m) or real(m, **kw))
    model = mixed_model()
    inferred_dtypes(onnx, model)
    (light,) = seen
    assert [t.name for t in light.graph.initializer] == ["shape"]  # the shape Reshape reads keeps its value
    assert light.ByteSize() < 1024 < model.ByteSize() - 2048 * 8
    assert [i.name for i in light.graph.input] == ["x", "w", "bias"]
    assert len(model.graph.initializer) == 3 and len(model.graph.input) == 1  # the model itself is untouched
    assert light.ir_version == model.ir_version and light.opset_import == model.opset_import


def test_the_copy_keeps_everything_but_large_initializer_data() -> None:
    model = mixed_model(ir_version=3, weights_as_inputs=True)
    model.graph.doc_string, model.producer_name = "a graph", "a producer"
    light = without_weights(onnx, model)
    assert light.graph.doc_string == "a graph" and light.producer_name == "a producer"
    assert light.graph.node == model.graph.node and light.graph.output == model.graph.output
    assert light.graph.input == model.graph.input  # declared already: not added twice
    assert [t.name for t in light.graph.initializer] == ["shape"]


@pytest.mark.parametrize(("elements", "kept"), [(MAX_KEPT_ELEMENTS, True), (MAX_KEPT_ELEMENTS + 1, False)])
def test_initializers_up_to_the_bound_keep_their_data(elements: int, kept: bool) -> None:
    t = numpy_helper.from_array(np.zeros((1, elements), np.float32), "t")
    graph = helper.make_graph([helper.make_node("Identity", ["t"], ["y"])], "g", [], [], initializer=[t])
    light = without_weights(onnx, helper.make_model(graph))
    assert [i.name for i in light.graph.initializer] == (["t"] if kept else [])
    assert [i.name for i in light.graph.input] == ([] if kept else ["t"])
    if not kept:
        tensor_type = light.graph.input[0].type.tensor_type
        assert tensor_type.elem_type == TensorProto.FLOAT
        assert [d.dim_value for d in tensor_type.shape.dim] == [1, elements]


def test_a_model_inference_rejects_still_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise RuntimeError("inference failed")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", fail)
    model = mixed_model()
    assert inferred_dtypes(onnx, model) == {"x": DataType.FLOAT16}  # the declared input's type only


def test_a_node_inference_cannot_type_leaves_the_others_typed() -> None:
    """Non-strict inference: one node whose inputs do not broadcast stays untyped, the rest are typed."""
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3]),
        helper.make_tensor_value_info("z", TensorProto.FLOAT, [4, 5]),
    ]
    nodes = [helper.make_node("Add", ["x", "z"], ["bad"]), helper.make_node("Relu", ["x"], ["good"])]
    outputs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ("bad", "good")]
    model = helper.make_model(helper.make_graph(nodes, "g", inputs, outputs))
    with pytest.raises(onnx.shape_inference.InferenceError):
        onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert inferred_dtypes(onnx, model)["good"] == DataType.FLOAT32


def einsum_model(equation: bytes, nested: bool = False) -> onnx.ModelProto:
    """x (2, 3) and k (3, 4) through an Einsum of ``equation`` (inside an If's branch where ``nested``)."""
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, d) for n, d in (("x", [2, 3]), ("k", [3, 4]))]
    node = helper.make_node("Einsum", ["x", "k"], ["y"])
    node.attribute.append(helper.make_attribute("equation", equation))
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    if nested:
        branch = helper.make_graph([node], "branch", [], [output])
        cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
        node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)
        inputs.append(cond)
    return helper.make_model(helper.make_graph([node], "g", inputs, [output]))


@pytest.mark.parametrize("nested", [False, True], ids=["top_level", "in_a_branch"])
def test_an_einsum_equation_outside_the_grammar_is_never_inferred(
    monkeypatch: pytest.MonkeyPatch, nested: bool
) -> None:
    """ONNX's C++ inference looped forever on an equation holding NUL bytes (a fuzzer's mutation of
    'bij,bjk->bik'): such a model skips inference, and the Einsum's mapping refuses it by name."""
    calls = []
    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", lambda *a, **k: calls.append(a) or a[0])
    declared = inferred_dtypes(onnx, einsum_model(b"i\x04\x00j,jk->ik", nested))
    assert declared["x"] == declared["k"] == declared["y"] == DataType.FLOAT32  # the declared types only
    assert calls == []
    inferred_dtypes(onnx, einsum_model(b"ij, jk -> ik...", nested))  # letters, commas, arrows, dots, spaces
    assert len(calls) == 1


def test_the_fuzzers_hanging_einsum_is_refused_by_name() -> None:
    from sigdnn.errors import GraphError
    from sigdnn.importers import onnx as onnx_import

    with pytest.raises(GraphError, match=r"Einsum.*equation"):
        onnx_import.load(einsum_model(b"i\x04\x00\x00\x00j,jk->ik").SerializeToString())


def test_only_an_einsums_equation_is_screened() -> None:
    """Another op's attribute named equation, however odd, is no reason to skip inference; an Einsum equation
    using every character of the grammar is inferred too."""
    from sigdnn.importers.onnx_types import EINSUM_CHARACTERS, _odd_einsum

    model = einsum_model(b"ij,jk->ik")
    other = helper.make_node("Custom", ["x"], ["z"], domain="my.domain")
    other.attribute.append(helper.make_attribute("equation", b"\x00\x04"))
    model.graph.node.append(other)
    assert _odd_einsum(model.graph) is False
    every = "".join(sorted(EINSUM_CHARACTERS)).encode()
    assert _odd_einsum(einsum_model(every).graph) is False
    assert _odd_einsum(einsum_model(every + b"\x00").graph) is True
