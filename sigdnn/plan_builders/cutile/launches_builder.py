"""The base of the cuTile builders whose plan is a list of launches (row, channel, reduction, pooling, delta rule).

A builder subclass supplies ``launches(node, graph)``: the kernels its plan
runs, with their grids and argument views, and the workspace they share. It
raises ValueError (or NotSupported) for what it does not handle; ``check``
and ``build`` both go through it, so a node is declined exactly when it
could not be built, with the reason naming the node.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

from sigdnn.dtypes import DataType
from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cutile import pointwise
from sigdnn.plan_builders.cutile.backend import backend_for
from sigdnn.plan_builders.cutile.steps import Launch, LaunchesPlan
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.runtime.device import Device
from sigdnn.signature_keys import SignatureKey

IO_DTYPES = frozenset({DataType.FLOAT32, DataType.FLOAT16, DataType.BFLOAT16})
INDEX_DTYPES = frozenset({DataType.INT32, DataType.INT64})


class CutileLaunchesBuilder(PlanBuilder):
    """A cuTile builder of one op family whose plan is a list of launches (``steps.LaunchesPlan``)."""

    library: ClassVar[str] = "cutile"
    device: ClassVar[str] = "gpu"
    index_ports: ClassVar[frozenset[str]] = frozenset()  # ports that may be int32 / int64 (lengths, offsets)

    def available(self) -> str | None:
        return pointwise.unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        ports = (*key.inputs, *key.outputs)
        return key.op in self.ops and all(
            d in IO_DTYPES or (p in self.index_ports and d in INDEX_DTYPES) for p, d in ports
        )

    @abstractmethod
    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        """The node's kernels in launch order and the workspace bytes they share; ValueError says why not."""

    def _plan(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        where = f"node '{node.name}'"
        for port, uid in node.op.ports().items():
            t = graph.tensors[uid]
            dtype = graph.dtype_of(t)
            if port in self.index_ports and dtype in INDEX_DTYPES:
                continue
            if dtype not in IO_DTYPES:
                raise NotSupported(f"{where}: port '{port}' (tensor '{t.name}') is {dtype}; "
                                   f"{self.name} reads and writes float32, float16 or bfloat16")  # fmt: skip
        compute = graph.compute_dtype_of(node)
        if compute not in IO_DTYPES:
            raise NotSupported(f"{where}: compute dtype {compute}; {self.name} computes in float32")
        try:
            return self.launches(node, graph)
        except ValueError as e:
            raise NotSupported(f"{where}: {e}") from None

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        if node.op.kind not in self.ops:
            raise NotSupported(f"node '{node.name}': {self.name} does not run {node.op.kind}")
        self._plan(node, graph)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        launches, workspace = self._plan(node, graph)
        return LaunchesPlan(launches, backend_for(context.device.context), workspace)
