"""GPU reference softmax and log-softmax with log-sum-exp statistics: two passes, no online rescaling.

With m the max over the axes (NaN propagates) and e = exp(x - m) (shifted
by 0 where m is -inf, so such a row sums to 0): y = e / sum(e), or
log y = (x - m) - log_sum with log_sum = log1p(sum of e below the max +
(maxima - 1)) where m is finite (relative accuracy for an entry holding
nearly all the mass), log(sum(e)) otherwise; stats = m + log_sum (+inf where
m is), as the CPU reference and torch.logsumexp.
"""

from __future__ import annotations

import math
from typing import ClassVar

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.gpu_reference.arrays import Array, where
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.plan_builders.gpu_reference.pointwise import log1p
from sigdnn.registry.engine_ids import IN_TREE


def softmax(x: Array, axes: tuple[int, ...], log: bool) -> tuple[Array, Array]:
    """(y, stats keepdims)."""
    m = x.reduce("MAX", axes)
    d = x - where(m == -math.inf, 0.0, m)
    e = d.apply("EXP")
    total = e.reduce("SUM", axes)
    below = x < m
    under = (e * below).reduce("SUM", axes)
    maxima = float(math.prod(x.shape[a] for a in axes)) - below.reduce("SUM", axes)
    finite = (m - m) == 0.0
    log_sum = where(finite, log1p(under + (maxima - 1.0)), total.apply("LOG"))
    y = d - log_sum if log else e / total
    return y, where(m == math.inf, math.inf, m + log_sum)


class GpuReferenceSoftmax(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.softmax"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("softmax",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        op = node.op

        def run(i: dict[str, Array | None]) -> dict[str, Array]:
            y, stats = softmax(i["x"], tuple(op.axes), op.log)
            return {"y": y, "stats": stats}

        return run
