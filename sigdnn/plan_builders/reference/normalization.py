"""Reference batchnorm, layernorm and rmsnorm, forward and backward (math.normalization).

Each builder passes the node's tensors and attributes to the math and keeps
the outputs the node has (optional statistics and running averages only
when the node writes them); the plan rounds each once to its dtype.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.batchnorm import Batchnorm
from sigdnn.graph.ops.layernorm import Layernorm
from sigdnn.graph.ops.rmsnorm import Rmsnorm
from sigdnn.graph.ops.rmsnorm_backward import RmsnormBackward
from sigdnn.plan_builders.reference import math
from sigdnn.plan_builders.reference.base import FloatReferenceBuilder, NarrowCompute
from sigdnn.plan_builders.reference.math.sink import Sink
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE

Compute = Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]


def present(node: Node, values: dict[str, np.ndarray | None]) -> dict[str, np.ndarray]:
    """The values of the output ports the node has."""
    outputs = node.op.outputs()
    return {port: value for port, value in values.items() if port in outputs and value is not None}


class ReferenceBatchnormInference(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.batchnorm_inference"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("batchnorm_inference",)
    runs_in_blocks: ClassVar[bool] = False  # the math blocks by channel itself

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            ports = ("x", "mean", "inv_variance", "scale", "bias")
            return {"y": math.batchnorm_inference(*(ins[p] for p in ports))}

        return compute


class ReferenceBatchnorm(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.batchnorm"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("batchnorm",)
    reads_narrow: ClassVar[bool] = True  # y is rounded into its output block by block

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> NarrowCompute:
        op: Batchnorm = node.op

        def compute(ins: dict[str, np.ndarray], sinks: dict[str, Sink]) -> dict[str, np.ndarray]:
            values = math.batchnorm_train(
                ins["x"],
                ins["scale"],
                ins["bias"],
                op.epsilon,
                ins.get("in_running_mean"),
                ins.get("in_running_var"),
                op.momentum,
                sinks["y"],
            )
            return present(node, dict(zip(op.output_ports, values)))

        return compute


class ReferenceBatchnormBackward(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.batchnorm_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("batchnorm_backward",)

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            values = math.batchnorm_backward(*(ins[p] for p in ("dy", "x", "scale", "mean", "inv_variance")))
            return dict(zip(("dx", "dscale", "dbias"), values))

        return compute


class ReferenceLayernorm(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.layernorm"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("layernorm",)
    reads_narrow: ClassVar[bool] = True  # y is rounded into its output block by block

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> NarrowCompute:
        op: Layernorm = node.op
        training = op.phase == "training"

        def compute(ins: dict[str, np.ndarray], sinks: dict[str, Sink]) -> dict[str, np.ndarray]:
            values = math.layernorm(ins["x"], ins["scale"], ins["bias"], op.epsilon, training, sinks["y"])
            return present(node, dict(zip(op.output_ports, values)))

        return compute


class ReferenceLayernormBackward(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.layernorm_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("layernorm_backward",)

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            values = math.layernorm_backward(*(ins[p] for p in ("dy", "x", "scale", "mean", "inv_variance")))
            return dict(zip(("dx", "dscale", "dbias"), values))

        return compute


class ReferenceRmsnorm(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.rmsnorm"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("rmsnorm",)
    reads_narrow: ClassVar[bool] = True  # y is rounded into its output block by block

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> NarrowCompute:
        op: Rmsnorm = node.op
        training = op.phase == "training"

        def compute(ins: dict[str, np.ndarray], sinks: dict[str, Sink]) -> dict[str, np.ndarray]:
            values = math.rmsnorm(ins["x"], ins["scale"], ins.get("bias"), op.epsilon, training, sinks["y"])
            return present(node, dict(zip(op.output_ports, values)))

        return compute


class ReferenceRmsnormBackward(FloatReferenceBuilder):
    name: ClassVar[str] = "reference.rmsnorm_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("rmsnorm_backward",)

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute:
        op: RmsnormBackward = node.op

        def compute(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            values = math.rmsnorm_backward(ins["dy"], ins["x"], ins["scale"], ins["inv_variance"], op.has_dbias)
            return present(node, dict(zip(op.output_ports, values)))

        return compute
