"""What the CuTe attention builders (sdpa forward and backward) share: the keys they serve, the node checks
made before their kernel views (the diagonal band they take: ``band_beyond_causal``, ``causal_mask``), and
``check`` as that view plus the device's compute capability."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.sdpa import VARLEN_PORTS, Band
from sigdnn.plan_builders.cute import unavailable_reason
from sigdnn.plan_builders.cute.sdpa_layout import IO_DTYPES
from sigdnn.plan_builders.gpu_properties import require_hopper
from sigdnn.registry.contracts import PlanBuilder
from sigdnn.runtime.device import Device
from sigdnn.signature_keys import SignatureKey


class CuteAttentionBuilder(PlanBuilder):
    """An sdpa-family builder on sm_90: 16-bit q, no additive bias, float32 compute; ``plan`` gives the view."""

    library = "cute"
    device = "gpu"
    priority = 2  # ahead of cuTile's attention (cutile.sdpa*), which runs what these decline
    op_type: ClassVar[type]

    def available(self) -> str | None:
        return unavailable_reason()

    def serves(self, key: SignatureKey) -> bool:
        ins = dict(key.inputs)
        return (
            key.op in self.ops
            and str(ins.get("q")) in IO_DTYPES
            and "bias" not in ins
            and not any(port in ins for port in VARLEN_PORTS)
            and str(key.compute) == "float32"
        )

    def supported_op(self, node: Node, graph: Graph) -> Any:
        """The node's op, or NotSupported naming what no CuTe attention kernel takes (bias, compute dtype)."""
        op = node.op
        where = f"node '{node.name}'"
        if not isinstance(op, self.op_type):
            raise NotSupported(f"{where}: not an {self.ops[0]}")
        if op.bias is not None:
            raise NotSupported(f"{where}: additive bias (port 'bias') is not supported by the CuTe kernel")
        varlen = [port for port in VARLEN_PORTS if getattr(op, port) is not None]
        if varlen:
            raise NotSupported(
                f"{where}: variable-length attention (ports {varlen}) is not supported by the CuTe kernels yet"
            )
        band = band_beyond_causal(node, graph)
        if band is not None:
            raise NotSupported(
                f"{where}: the diagonal band ({band}) is not supported by the CuTe kernels; the top-left causal mask is"
            )
        compute = str(graph.compute_dtype_of(node))
        if compute != "float32":
            raise NotSupported(f"{where}: compute dtype {compute}; supported: float32")
        return op

    @abstractmethod
    def plan(self, node: Node, graph: Graph) -> tuple[Any, Any]:
        """(kernel spec, problem) of the node, or NotSupported saying why."""

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        self.plan(node, graph)
        require_hopper(node, device)


def band_beyond_causal(node: Node, graph: Graph) -> str | None:
    """The diagonal band an attention node masks by beyond the CuTe kernels' mask (none, or the top-left causal
    one), described; None when it has none (the cuTile attention takes every band). Bottom-right alignment with no padding and Sq == Skv is the top-left diagonal."""
    op = node.op
    band = Band.of(op)
    if not band.masks:
        return None
    q, k = graph.tensors[op.q], graph.tensors[op.k]
    level = not any(getattr(op, port) is not None for port in VARLEN_PORTS) and q.dims[2] == k.dims[2]
    if band.left is None and band.right == 0 and (not band.bottom_right or level):
        return None
    alignment = "bottom-right" if band.bottom_right else "top-left"
    return f"left_bound {band.left}, right_bound {band.right}, {alignment} aligned"


def causal_mask(op: object) -> bool:
    """Whether a node the CuTe kernels take (``band_beyond_causal`` None) masks as the top-left causal mask: its
    causal flag, or a right bound 0 however the graph spelled it (a cuDNN JSON or pygraph right_bound)."""
    return Band.of(op).masks
