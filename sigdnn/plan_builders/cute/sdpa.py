"""CuTe DSL sdpa (forward) builder for Hopper: flash attention, bfloat16 / float16, head dim 64 or 128.

Causal or not, grouped-query / multi-query heads (k and v heads dividing
q's), any attn_scale > 0, and the stats output (the logsumexp of each
score row, float32) for training. ``check`` decides from the graph alone
(sdpa_layout.plan_sdpa) and the device's compute capability; ``build``
compiles (or loads) the specialization and fixes every launch scalar, so
``execute`` hands over only the pointers and the stream. The DSL is
imported on first build, never when this module loads.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from typing import Any

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.sdpa import Sdpa
from sigdnn.plan_builders.cute.attention import CuteAttentionBuilder, causal_mask
from sigdnn.plan_builders.cute.bound import BindsLaunches, check_aligned
from sigdnn.plan_builders.cute.sdpa_layout import (
    FmhaConfig,
    FmhaProblem,
    FmhaSpec,
    check_config,
    default_config,
    parse_config,
    plan_sdpa,
)
from sigdnn.plan_builders.gpu_properties import device_id_of, device_properties
from sigdnn.registry.contracts import BuildContext, NodePlan
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import ExecutionContext


def config_override() -> FmhaConfig | None:
    """``SIGDNN_CUTE_SDPA=m128n128s2`` style override of the default tiles (benchmarks, tuning)."""
    raw = os.environ.get("SIGDNN_CUTE_SDPA")
    return parse_config(raw) if raw else None


class CuteSdpaPlan(BindsLaunches, NodePlan):
    """Runs one sdpa node: the specialization and every scalar are fixed at build."""

    workspace_bytes = 0

    def __init__(self, launch: Any, where: str) -> None:
        self._launch = launch
        self._where = where

    @property
    def config(self) -> FmhaConfig:
        return self._launch.config

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        q, k, v, o = (buffers[p] for p in ("q", "k", "v", "o"))
        stats = buffers.get("stats")
        check_aligned(self._where, q=q, k=k, v=v)
        stats_ptr = 0 if stats is None else stats.ptr
        return functools.partial(self._launch, q.ptr, k.ptr, v.ptr, o.ptr, stats_ptr, context.stream)


class CuteSdpaBuilder(CuteAttentionBuilder):
    """Flash-attention forward on sm_90 through TMA + wgmma (see kernels/fmha_sm90.py)."""

    name = "cute.sdpa"
    engine_id = IN_TREE[name]
    ops = ("sdpa",)
    op_type = Sdpa

    def plan(self, node: Node, graph: Graph) -> tuple[FmhaSpec, FmhaProblem]:
        """The kernel view of the node, or NotSupported saying why."""
        op = self.supported_op(node, graph)
        where = f"node '{node.name}'"

        def view(uid: int) -> tuple[tuple[int, ...], tuple[int, ...], str]:
            t = graph.tensors[uid]
            return t.dims, t.strides, str(graph.dtype_of(t))

        stats = view(op.stats) if op.generate_stats and op.stats is not None else None
        try:
            return plan_sdpa(view(op.q), view(op.k), view(op.v), view(op.o), stats, op.attn_scale, causal_mask(op))
        except ValueError as exc:
            raise NotSupported(f"{where}: {exc}") from None

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        from sigdnn.plan_builders.cute.kernels.fmha_launch import FmhaLaunch

        self.check(node, graph, context.device)
        spec, problem = self.plan(node, graph)
        config = config_override() or default_config(spec)
        try:
            check_config(spec, config)
        except ValueError as exc:
            raise NotSupported(f"node '{node.name}': {exc}") from None
        _, sm_count = device_properties(device_id_of(context.device))
        return CuteSdpaPlan(FmhaLaunch(spec, config, problem, sm_count), f"node '{node.name}'")
