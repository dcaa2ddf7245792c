"""decline_non_float: the first non-float port outside the allowed integer ports is named; float ones pass."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.declines import decline_non_float


def add_graph(b_dtype: str) -> sigdnn.Graph:
    g = sigdnn.Graph("g", io_dtype="float32", compute_dtype="float32")
    a = g.tensor("a", dims=(2, 3))
    b = g.tensor("b", dims=(2, 3), dtype=b_dtype)
    g.pointwise("add", a, b, name="n").set_output(True)
    return g


def test_float_ports_pass() -> None:
    g = add_graph("float16")
    decline_non_float(g.nodes[0], g)


def test_an_integer_port_is_named() -> None:
    g = add_graph("int32")
    with pytest.raises(NotSupported, match=r"node 'n': port 'in_1' \(tensor 'b'\) is int32; pointwise is floating"):
        decline_non_float(g.nodes[0], g)


def test_an_allowed_integer_port_passes() -> None:
    g = add_graph("int32")
    decline_non_float(g.nodes[0], g, integer_ports=("in_1",))
