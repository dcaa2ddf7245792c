"""CuTe DSL sdpa_backward builder for Hopper: flash-attention backward, bfloat16 / float16, head dim 64 or 128.

Causal or not, grouped-query / multi-query heads (dk and dv summed over
the query heads sharing each kv head), any attn_scale > 0; p is recomputed
from the forward's stats (the natural-log logsumexp of each score row, as
the op defines it). ``check`` decides from the graph alone
(sdpa_backward_layout.plan_sdpa_backward) and the device's compute
capability; ``build`` compiles (or loads) the three kernels and fixes every
launch scalar, so a bound launch hands over only the pointers, the workspace
(the float32 dq accumulator and two floats per query row) and the stream.
The DSL is imported on first build, never when this module loads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.sdpa_backward import SdpaBackward
from sigdnn.plan_builders.cute.attention import CuteAttentionBuilder, causal_mask
from sigdnn.plan_builders.cute.bound import BindsLaunches, check_aligned
from sigdnn.plan_builders.cute.sdpa_backward_layout import BwdProblem, BwdSpec, plan_sdpa_backward
from sigdnn.registry.contracts import BuildContext, NodePlan
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import ExecutionContext

PORTS = ("q", "k", "v", "o", "d_o", "stats", "dq", "dk", "dv")


class CuteSdpaBackwardPlan(BindsLaunches, NodePlan):
    """Runs one sdpa_backward node: the specializations and every scalar are fixed at build."""

    def __init__(self, launch: Any, problem: BwdProblem, where: str) -> None:
        self._launch = launch
        self._where = where
        self.workspace_bytes = problem.workspace_bytes

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        check_aligned(self._where, **{p: buffers[p] for p in ("q", "k", "v", "o", "d_o")})
        ptrs = {p: buffers[p].ptr for p in PORTS}
        return functools.partial(self._launch, ptrs, context.workspace.ptr, context.stream)


class CuteSdpaBackwardBuilder(CuteAttentionBuilder):
    """Flash-attention backward on sm_90 through TMA + wgmma (see kernels/fmha_bwd_sm90.py)."""

    name = "cute.sdpa_backward"
    engine_id = IN_TREE[name]
    ops = ("sdpa_backward",)
    op_type = SdpaBackward

    def plan(self, node: Node, graph: Graph) -> tuple[BwdSpec, BwdProblem]:
        """The kernel view of the node, or NotSupported saying why."""
        op = self.supported_op(node, graph)
        where = f"node '{node.name}'"
        tensors = {}
        for port in PORTS:
            t = graph.tensors[getattr(op, port)]
            tensors[port] = (t.dims, t.strides, str(graph.dtype_of(t)))
        try:
            return plan_sdpa_backward(tensors, op.attn_scale, causal_mask(op))
        except ValueError as exc:
            raise NotSupported(f"{where}: {exc}") from None

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        from sigdnn.plan_builders.cute.kernels.fmha_bwd_launch import FmhaBwdLaunch

        self.check(node, graph, context.device)
        spec, problem = self.plan(node, graph)
        return CuteSdpaBackwardPlan(FmhaBwdLaunch(spec, problem), problem, f"node '{node.name}'")
