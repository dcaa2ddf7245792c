"""Ranking of the builders that serve one key.

This function is the seam a cost model or an autotuner replaces: it gets
the candidates and the node and returns them best first.
"""

from __future__ import annotations

from collections.abc import Sequence

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.registry.contracts import PlanBuilder


def rank(builders: Sequence[PlanBuilder], node: Node, graph: Graph) -> list[PlanBuilder]:
    """Best first: higher priority, then lower engine id (older, more proven)."""
    return sorted(builders, key=lambda b: (-b.priority, b.engine_id))
