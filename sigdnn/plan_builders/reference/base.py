"""Shared base of the NumPy reference builders.

A reference plan reads each input at full value (float64, or int64 when the
node computes in an integer type), computes, and rounds once to the output's
declared dtype. Buffers are NumPy views with any strides.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from sigdnn.dtypes import DataType, round_to
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder


def widen(array: np.ndarray, integer: bool) -> np.ndarray:
    """Exact float64 (or int64) values of a stored array (NaN/inf to int64 is undefined, as in C)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return array.astype(np.int64 if integer else np.float64, copy=False)


def store(out: np.ndarray, value: np.ndarray, dtype: DataType) -> None:
    """Round ``value`` to ``dtype`` once and write it into the (strided) view."""
    np.copyto(out, np.broadcast_to(round_to(value, dtype), out.shape))


class ReferencePlan(NodePlan):
    """Runs ``compute(inputs) -> {port: value}`` and stores each output."""

    def __init__(
        self,
        compute: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
        integer: bool,
        out_dtypes: dict[str, DataType],
    ) -> None:
        self._compute = compute
        self._integer = integer
        self._out_dtypes = out_dtypes

    def execute(self, buffers: Mapping[str, Any], stream: Any = None) -> None:
        inputs = {p: widen(buffers[p], self._integer) for p in buffers if p not in self._out_dtypes}
        with np.errstate(all="ignore"):
            results = self._compute(inputs)
        for port, value in results.items():
            store(buffers[port], value, self._out_dtypes[port])


class ReferenceBuilder(PlanBuilder):
    """A CPU builder; subclasses supply ``make_compute``."""

    backend: ClassVar[str] = "reference"
    device: ClassVar[str] = "cpu"

    def make_compute(
        self, node: Node, graph: Graph, ctx: BuildContext
    ) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
        raise NotImplementedError

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        return graph.compute_dtype_of(node).is_integer

    def build(self, node: Node, graph: Graph, ctx: BuildContext) -> NodePlan:
        outs = {p: graph.dtype_of(graph.tensors[u]) for p, u in node.op.outputs().items()}
        return ReferencePlan(self.make_compute(node, graph, ctx), self.computes_in_integers(node, graph), outs)
