"""cuTile pointwise builder: every mode of docs/ops.md, one generated kernel per node.

A node is a KernelSpec of one node (``spec.kernel_spec``); the kernel is
generated, compiled on first launch and cached per spec, so every node of
the same mode, dtypes, parameters and layout shares one kernel. Floating-
point modes compute in float32 (io float32 / float16 / bfloat16 / fp8, and
int8 / uint8 / bool read exactly); integer compute covers the modes whose
integer result the reference defines. Declines say why, naming the node.
"""

from __future__ import annotations

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cutile.backend import backend_for
from sigdnn.plan_builders.cutile.codegen import CT_DTYPES, KernelSpec
from sigdnn.plan_builders.cutile.plans import CutileNodePlan, KernelLaunch
from sigdnn.plan_builders.cutile.pointwise_expressions import FLOAT_MODES, INTEGER_MODES
from sigdnn.plan_builders.cutile.spec import kernel_spec
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device
from sigdnn.signature_keys import SignatureKey


def unavailable_reason() -> str | None:
    """Why cuTile cannot run here (no cuda.core, no GPU, no cuda.tile), else None."""
    from sigdnn.runtime.cuda import dsl_unavailable_reason

    return dsl_unavailable_reason("cuda.tile", "cuda.tile")


def node_spec(node: Node, graph: Graph) -> tuple[KernelSpec, tuple[str, ...]]:
    """The node's kernel spec and, per kernel input, the port it is read from (a tensor read twice is one input)."""
    ports: dict[int, str] = {}
    for port, uid in node.op.inputs().items():
        ports.setdefault(uid, port)
    return kernel_spec(graph, [node], list(ports), [node.op.out_0]), tuple(ports.values())


class CutilePointwiseBuilder(PlanBuilder):
    name = "cutile.pointwise"
    engine_id = IN_TREE[name]
    library = "cutile"
    device = "gpu"
    ops = ("pointwise",)

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        mode = key.trait("mode")
        known = mode in FLOAT_MODES or mode in INTEGER_MODES or mode == "gen_index"
        return key.op == "pointwise" and known and all(str(d) in CT_DTYPES for _, d in (*key.inputs, *key.outputs))

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        if node.op.kind != "pointwise":
            raise NotSupported(f"node '{node.name}': not a pointwise node")
        node_spec(node, graph)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        spec, ports = node_spec(node, graph)
        return CutileNodePlan(KernelLaunch(spec, backend_for(context.device.context)), ports, ("out_0",))
