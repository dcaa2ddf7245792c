"""The cost of an op: one declaration in a test module gets a key, a reference plan and a wire format."""

from __future__ import annotations

import numpy as np
import pytest
from minimal_op import WIRE_MEMBER, Axpb, ReferenceAxpb

import sigdnn
from sigdnn.errors import GraphError, SchemaError
from sigdnn.registry import Registry


def graph(with_abs: bool = True, bias: bool = True) -> sigdnn.Graph:
    g = sigdnn.Graph("axpb", io_dtype="float32")
    x = g.tensor("x", (2, 3))
    b = g.tensor("b", (1, 3)) if bias else None
    node = g.add_node(Axpb, {"x": x, "b": b}, {"alpha": -2.0, "with_abs": with_abs}, name="n")
    for t in g.outputs_of(node):
        if t is not None:
            t.set_output(True)
    return g


def executor() -> sigdnn.Executor:
    registry = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
    registry.register(ReferenceAxpb)
    return sigdnn.Executor(registry=registry)


def test_key_names_op_traits_and_present_ports() -> None:
    g = graph()
    key = sigdnn.key_for(g.nodes[0], g)
    assert str(key) == "Axpb[with_abs=True](f32,f32->f32,f32; f32)"
    assert [p for p, _ in key.inputs] == ["x", "b"]
    assert key != sigdnn.key_for(graph(bias=False).nodes[0], graph(bias=False))


def test_runs_on_the_reference_with_optional_ports_and_outputs() -> None:
    x = np.array([[1, -2, 3], [0.5, 0, -1]], np.float32)
    b = np.array([[10, 20, 30]], np.float32)
    out = executor().run(graph(), {"x": x, "b": b})
    np.testing.assert_array_equal(out["n::y"], -2 * x + b)
    np.testing.assert_array_equal(out["n::y_abs"], np.abs(-2 * x + b))
    only_y = executor().run(graph(with_abs=False, bias=False), {"x": x})
    assert list(only_y) == ["n::y"]
    np.testing.assert_array_equal(only_y["n::y"], -2 * x)


def test_wire_round_trip_without_a_schema_table() -> None:
    g = graph()
    data = g.serialize()
    back = sigdnn.deserialize(data)
    assert back == g
    assert back.serialize() == data
    assert back.nodes[0].op == g.nodes[0].op


def test_wire_member_is_what_the_declaration_says() -> None:
    assert Axpb.codec().member == WIRE_MEMBER
    assert Axpb.codec().slots == tuple(range(len(Axpb.wire_fields)))


def test_shape_rule_and_missing_ports_name_the_node_and_port() -> None:
    g = sigdnn.Graph("bad", io_dtype="float32")
    x, b = g.tensor("x", (2, 3)), g.tensor("b", (4, 3))
    with pytest.raises(GraphError, match=r"node 'n'.*port 'b'"):
        g.add_node(Axpb, {"x": x, "b": b}, {"alpha": 1.0}, name="n")
    with pytest.raises(GraphError, match=r"node 'm'.*needs input port\(s\) \['x'\]"):
        g.add_node(Axpb, {"b": b}, {"alpha": 1.0}, name="m")
    with pytest.raises(GraphError, match="has no input port 'z'"):
        g.add_node(Axpb, {"x": x, "z": b}, {"alpha": 1.0}, name="k")
    assert not g.nodes and len(g.tensors) == 2  # a refused node leaves nothing behind


def test_an_output_the_attributes_do_not_ask_for_is_refused_on_the_wire() -> None:
    g = graph(with_abs=True)
    g.nodes[0] = sigdnn.Node("n", attrs_evolve(g.nodes[0].op, with_abs=False))
    with pytest.raises(GraphError, match="y_abs"):
        sigdnn.deserialize(g.serialize())


def test_unknown_union_member_is_a_schema_error() -> None:
    data = bytearray(graph().serialize())
    # The node's union type byte holds WIRE_MEMBER: rewrite it to a member nothing declares.
    at = data.rfind(bytes([WIRE_MEMBER]))
    data[at] = 251
    with pytest.raises(SchemaError, match="union member 251"):
        sigdnn.deserialize(bytes(data))


def attrs_evolve(op: Axpb, **changes: object) -> Axpb:
    import attrs

    return attrs.evolve(op, **changes)
