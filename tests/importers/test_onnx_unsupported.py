"""What an ONNX model holds that sigdnn cannot take is reported whole, each op type once, before anything runs.

The importer scans every node: an op type it does not map (in the default
domain or another), and every node fed by one, joins a single GraphError
listing each type with its node count and first node's name; nodes after
the first refusal build nothing. Nodes out of topological order, and
attributes an op's ONNX schema does not define, are refused naming the node.
"""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from onnx import TensorProto, helper

from sigdnn.errors import GraphError
from sigdnn.importers import onnx as onnx_import


def model(nodes: list, outputs: tuple[str, ...] = ("y",)) -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs]
    graph = helper.make_graph(nodes, "g", [x], outs)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets).SerializeToString()


def test_every_unsupported_op_type_is_listed_with_its_count_and_first_node() -> None:
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("FusedGemm", ["a", "a"], ["b"], name="fused", domain="com.microsoft"),
        helper.make_node("Det", ["a"], ["c"], name="det1"),
        helper.make_node("Relu", ["x"], ["d"], name="after"),  # after a refusal: scanned, not built
        helper.make_node("Det", ["d"], ["e"], name="det2"),
        helper.make_node("Det", ["c"], ["f"], name="det_of_det"),  # fed by an unsupported node
        helper.make_node("Relu", ["b"], ["g"], name="relu_of_fused"),  # mapped, but fed by one: not listed
        helper.make_node("Add", ["f", "g"], ["y"], name="add"),
    ]
    listed = r"Det \(3 nodes, first 'det1'\); com\.microsoft\.FusedGemm \(1 node, first 'fused'\)\. Supported: "
    with pytest.raises(GraphError, match=rf"^ONNX model: 2 unsupported op type\(s\): {listed}"):
        onnx_import.load(model(nodes))


def test_an_explicit_default_domain_is_the_default_domain() -> None:
    graph = onnx_import.load(model([helper.make_node("Relu", ["x"], ["y"], name="relu", domain="ai.onnx")]))
    assert [n.op.kind for n in graph.nodes] == ["pointwise"]


def test_a_node_reading_a_later_nodes_output_is_refused_naming_it() -> None:
    nodes = [helper.make_node("Relu", ["a"], ["y"], name="first"), helper.make_node("Relu", ["x"], ["a"], name="then")]
    with pytest.raises(GraphError, match=r"'first'.*\['a'\] are produced by no earlier node \(not topological\)"):
        onnx_import.load(model(nodes))


def test_an_attribute_the_ops_schema_lacks_is_refused_naming_the_node() -> None:
    node = helper.make_node("Relu", ["x"], ["y"], name="relu", alpha=0.5)  # LeakyRelu's, not Relu's
    with pytest.raises(GraphError, match=r"'relu'.*unsupported attribute\(s\) \['alpha'\]"):
        onnx_import.load(model([node]))
