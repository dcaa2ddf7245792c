"""The helpers every importer shares: fresh names, appending an op by uids, input_shapes, unknown attributes."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import GraphError, UsageError
from sigdnn.importers.common import FreshNames, add_op, input_shape_overrides, refuse_unknown


def test_fresh_names_number_repeats_from_one_and_fall_back_for_empty_names() -> None:
    fresh = FreshNames()
    assert [fresh("a", "t"), fresh("a", "t"), fresh("a", "t"), fresh("", "t"), fresh("", "t")] == [
        "a",
        "a_1",
        "a_2",
        "t",
        "t_1",
    ]


def test_add_op_appends_the_node_and_returns_it() -> None:
    graph = sigdnn.Graph("g")
    node = add_op(graph, "pointwise", "n", None, "node 'n'", mode="add", in_0=1, in_1=2, out_0=3)
    assert graph.nodes == [node] and node.name == "n" and node.op.kind == "pointwise"


def test_add_op_names_the_node_for_a_field_the_op_cannot_take() -> None:
    with pytest.raises(GraphError, match=r"node 'n': bad attributes for sigdnn pointwise"):
        add_op(sigdnn.Graph("g"), "pointwise", "n", None, "node 'n'", mode="add", in_0=1, out_0=2, no_such=1)


def test_input_names_must_be_strings() -> None:
    with pytest.raises(UsageError, match=r"input_shapes\[1\]: input names are strings"):
        input_shape_overrides({1: (1, 2)})


def test_refuse_unknown_says_attribute_by_default() -> None:
    with pytest.raises(GraphError, match=r"node 'n': unsupported attribute\(s\) \['b'\]"):
        refuse_unknown("node 'n'", ["a", "b"], ["a"])
