"""A minimal op defined entirely here: no schema table, no edit anywhere else.

It proves what adding an op costs: the declaration below, a reference
builder, and tests. ``axpb``: y = alpha * x (+ b when the optional port is
given); with ``with_abs`` it also produces |y| on an optional second output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import ClassVar

import attrs
import numpy as np

from sigdnn import Graph, Node
from sigdnn.errors import GraphError
from sigdnn.graph.ops.base import Op, broadcast_dims
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.reference.base import ReferenceBuilder
from sigdnn.registry import BuildContext

WIRE_MEMBER = 250  # a union member no schema table uses


@attrs.frozen
class Axpb(Op):
    kind: ClassVar[str] = "axpb"
    table: ClassVar[str | None] = None
    wire_member: ClassVar[int | None] = WIRE_MEMBER
    input_ports: ClassVar[tuple[str, ...]] = ("x", "b")
    output_ports: ClassVar[tuple[str, ...]] = ("y", "y_abs")
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("x", "uid"),
        ("b", "uid?"),
        ("y", "uid"),
        ("y_abs", "uid?"),
        ("alpha", "f64"),
        ("with_abs", "bool"),
    )
    key_attributes: ClassVar[tuple[str, ...]] = ("with_abs",)

    x: int
    y: int
    alpha: float
    b: int | None = None
    y_abs: int | None = None
    with_abs: bool = False

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x, b = graph.tensor("x", (2, 3)), graph.tensor("b", (1, 3))
        node = graph.add_node(cls, {"x": x, "b": b}, {"alpha": 2.5, "with_abs": True}, name="axpb")
        for t in graph.outputs_of(node):
            t.set_output(True)
        return node

    def elementwise(self) -> bool:
        return True

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        dims = inputs["x"].dims
        if "b" in inputs:
            dims = broadcast_dims([dims, inputs["b"].dims], "axpb: port 'b'")
            if dims != inputs["x"].dims:
                raise GraphError(f"axpb: port 'b' {list(inputs['b'].dims)} must broadcast to x's dims")
        return {"y": dims, "y_abs": dims} if self.with_abs else {"y": dims}


class ReferenceAxpb(ReferenceBuilder):
    name: ClassVar[str] = "plugin.axpb"
    engine_id: ClassVar[int] = 30900
    library: ClassVar[str] = "plugin-reference"
    ops: ClassVar[tuple[str, ...]] = ("axpb",)

    def make_compute(
        self, node: Node, graph: Graph, context: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        op: Axpb = node.op

        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            y = op.alpha * ins["x"] + ins.get("b", 0.0)
            return {"y": y, "y_abs": np.abs(y)} if op.with_abs else {"y": y}

        return compute
