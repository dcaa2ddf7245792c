"""cuTile softmax / log-softmax with optional statistics: one row kernel (``row_kernel_source.softmax_forward``).

x must be rows with the softmax axes innermost in memory (``tensor_views.rows``),
y laid out as x, the statistics one per row in row order.
"""

from __future__ import annotations

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.softmax import Softmax
from sigdnn.plan_builders import tensor_views
from sigdnn.plan_builders.cutile import row_kernel_source, tiling
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.source import KernelSource
from sigdnn.plan_builders.cutile.steps import Arg, Launch
from sigdnn.plan_builders.cutile.tiling import cdiv, row_tiles
from sigdnn.registry.engine_ids import IN_TREE


class CutileSoftmaxBuilder(CutileLaunchesBuilder):
    name = "cutile.softmax"
    engine_id = IN_TREE[name]
    ops = ("softmax",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op: Softmax = node.op
        x, y = graph.tensors[op.x], graph.tensors[op.y]
        m, n = tensor_views.rows(x, op.axes)
        tensor_views.same_layout(x, [y])
        config = tiling.for_width(tiling.SOFTMAX_FORWARD, n)
        tm, tn, k = row_tiles(m, n, config)
        args = [Arg("x", (m, n), (n, 1)), Arg("y", (m, n), (n, 1))]
        if op.stats is not None:
            batch = [a for a in range(x.rank) if a not in op.axes]
            args.append(Arg("stats", (m,), (tensor_views.vector_stride(graph.tensors[op.stats], x, batch, n),)))
        hints = tiling.row_hints(config, n, tm, tn, k)
        tiles, blocks = cdiv(m, tm), config.blocks
        text = row_kernel_source.softmax_forward(
            n, tm, tn, op.log, op.stats is not None, hints, k=k, tiles=tiles, blocks=blocks
        )
        return [Launch(KernelSource("softmax", text), (row_kernel_source.grid_of(tiles, blocks),), tuple(args))], 0
