"""The GPU reference's plan and builder base: read every input exactly, compute in float64, round once.

A builder supplies a ``Formula``: arrays by input port (float64, or int64
for integer compute; None for an absent optional input) -> arrays by output
port (or a ``Permuted`` array: stored through the output's axes in its order). The plan reads the inputs
on the device (``tensors.read``; in logical axis order, or in the order ``input_orders`` names, where a
formula gathers faster from a copy in the storage's order), runs the
formula (launches of ``kernels/tiles.py`` only) and writes each output the
node has (``tensors.write``), then waits for the device: scratch arrays die
with the run.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.declines import decline_non_float
from sigdnn.plan_builders.gpu_reference import backend
from sigdnn.plan_builders.gpu_reference.arrays import Array, Permuted
from sigdnn.plan_builders.gpu_reference.backend import run_on
from sigdnn.plan_builders.gpu_reference.tensors import read, write
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.runtime.device import Device, ExecutionContext

LIBRARY = "gpu_reference"
Formula = Callable[[dict[str, Array | None]], dict[str, Array | Permuted]]


class GpuReferencePlan(NodePlan):
    """Runs one node's formula on the device from its buffers (device arrays, or host arrays when emulated)."""

    def __init__(
        self,
        formula: Formula,
        inputs: tuple[str, ...],
        outputs: dict[str, DataType],
        wide: Any,
        orders: Mapping[str, tuple[int, ...]] | None = None,
    ) -> None:
        self._formula = formula
        self._inputs = inputs
        self._outputs = outputs
        self._wide = np.dtype(wide)
        self._orders = dict(orders or {})

    def execute(self, buffers: Mapping[str, Any], context: ExecutionContext) -> None:
        with run_on(context.device.context, context.stream) as gpu:
            buffers, copy_back = gpu.on_device(buffers, self._outputs)
            ins = {
                p: read(gpu, buffers[p], self._wide, self._orders.get(p)) if p in buffers else None
                for p in self._inputs
            }
            for port, value in self._formula(ins).items():
                if port in buffers:
                    write(gpu, value, buffers[port], self._outputs[port])
            copy_back()


def unavailable_reason() -> str | None:
    """Why the GPU reference cannot run here (no GPU, no cuTile), else None. Tests of the emulated
    library replace it."""
    return backend.cutile_unavailable_reason()


class GpuReferenceBuilder(PlanBuilder):
    """A GPU reference builder; subclasses supply ``formula`` (and ``check`` where they decline)."""

    library: ClassVar[str] = LIBRARY
    device: ClassVar[str] = "gpu"
    float_only: ClassVar[bool] = True  # the op is defined on floating point only (as the CPU reference's)

    def available(self) -> str | None:
        return unavailable_reason()

    def check(self, node: Node, graph: Graph, device: Device) -> None:
        if self.float_only:
            decline_non_float(node, graph)

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        return not self.float_only and graph.compute_dtype_of(node).is_integer

    @abstractmethod
    def formula(self, node: Node, graph: Graph) -> Formula:
        """The node's math on float64 (int64) device arrays."""

    def input_orders(self, node: Node, graph: Graph) -> dict[str, tuple[int, ...]]:
        """The axis order each input port is read in where not the logical one (``tensors.read``'s ``order``)."""
        return {}

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        wide = np.int64 if self.computes_in_integers(node, graph) else np.float64
        formula, orders = self.formula(node, graph), self.input_orders(node, graph)
        return GpuReferencePlan(formula, tuple(node.op.inputs()), dict(context.key.outputs), wide, orders)
