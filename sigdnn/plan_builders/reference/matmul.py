"""Reference matmul: float64 (int64 for integer compute) batched product."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.reference.base import ReferenceBuilder
from sigdnn.registry.contracts import BuildContext
from sigdnn.signature_keys import MatmulKey


class ReferenceMatmul(ReferenceBuilder):
    name: ClassVar[str] = "reference.matmul"
    engine_id: ClassVar[int] = 1001
    key_type: ClassVar[type] = MatmulKey

    def make_compute(
        self, node: Node, graph: Graph, ctx: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        return lambda ins: {"c": np.matmul(ins["a"], ins["b"])}
