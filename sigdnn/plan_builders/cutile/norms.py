"""cuTile layernorm and rmsnorm, forward (training and inference) and backward, as row kernels (``row_kernel_source``).

x must be rows with the normalized axes innermost in memory; y, dy and dx
laid out as x; scale, bias, dscale and dbias vectors in the order of a
row's elements; mean and inv_variance one per row in row order. Backward
is two launches: dx with per-block partial sums of dscale / dbias in the
workspace, then the column sums of those partials.
"""

from __future__ import annotations

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.shapes import normalized_axes
from sigdnn.plan_builders import tensor_views
from sigdnn.plan_builders.cutile import row_kernel_source, tiling
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.source import KernelSource
from sigdnn.plan_builders.cutile.steps import Arg, Launch, Workspace
from sigdnn.plan_builders.cutile.tiling import cdiv, pow2, row_tiles
from sigdnn.registry.engine_ids import IN_TREE


def _rows(node: Node, graph: Graph, x_port: str) -> tuple[int, int, tuple[int, ...], tuple[int, ...]]:
    """(M, N, normalized axes, batch axes) of the node's x, with every row-shaped port checked against it."""
    ports = node.op.ports()
    x, scale = graph.tensors[ports[x_port]], graph.tensors[ports["scale"]]
    axes = normalized_axes(f"node '{node.name}'", x_port, x, "scale", scale)
    m, n = tensor_views.rows(x, axes)
    tensor_views.same_layout(x, [graph.tensors[ports[p]] for p in ("y", "dy", "dx") if p in ports])
    return m, n, axes, tuple(a for a in range(x.rank) if a not in axes)


def _vector(node: Node, graph: Graph, port: str, x_port: str, axes: tuple[int, ...], unit: int, length: int) -> Arg:
    ports = node.op.ports()
    t, x = graph.tensors[ports[port]], graph.tensors[ports[x_port]]
    lead = x.rank - t.rank  # a scale of lower rank aligns with x's trailing dims (docs/ops.md, layernorm)
    t = attrs.evolve(t, dims=(1,) * lead + t.dims, strides=(0,) * lead + t.strides)
    stride = tensor_views.vector_stride(t, x, axes, unit)
    return Arg(port, (length,), (stride,))


def forward(node: Node, graph: Graph, center: bool) -> tuple[list[Launch], int]:
    op = node.op
    m, n, axes, batch = _rows(node, graph, "x")
    config = tiling.for_width(tiling.LAYERNORM_FORWARD if center else tiling.RMSNORM_FORWARD, n)
    tm, tn, k = row_tiles(m, n, config)
    bias = getattr(op, "bias", None) is not None
    stats = tuple(p for p in ("mean", "inv_variance") if getattr(op, p, None) is not None)
    args = [Arg("x", (m, n), (n, 1)), _vector(node, graph, "scale", "x", axes, 1, n)]
    if bias:
        args.append(_vector(node, graph, "bias", "x", axes, 1, n))
    args.append(Arg("y", (m, n), (n, 1)))
    args += [_vector(node, graph, p, "x", batch, n, m) for p in stats]
    names = tuple("mean" if p == "mean" else "inv" for p in stats)
    hints = tiling.row_hints(config, n, tm, tn, k)
    tiles = cdiv(m, tm)
    text = row_kernel_source.norm_forward(
        n, tm, tn, op.epsilon, center, bias, names, hints, config.variance, k=k, tiles=tiles, blocks=config.blocks
    )
    prefix = "layernorm" if center else "rmsnorm"
    return [Launch(KernelSource(prefix, text), (row_kernel_source.grid_of(tiles, config.blocks),), tuple(args))], 0


def backward(node: Node, graph: Graph, center: bool) -> tuple[list[Launch], int]:
    op = node.op
    m, n, axes, batch = _rows(node, graph, "x")
    config = tiling.ROW_BACKWARD
    tm, tn, k = row_tiles(m, n, config)
    hints = tiling.row_hints(config, n, tm, tn, k)
    blocks = max(1, min(cdiv(m, tm), tiling.persistent_blocks(hints)))
    width = cdiv(n, tn) * tn
    dbias = getattr(op, "dbias", None) is not None
    work = Workspace()
    partials = [work.take((blocks, width)) for _ in range(2 if dbias else 1)]
    args = [Arg("dy", (m, n), (n, 1)), Arg("x", (m, n), (n, 1)), _vector(node, graph, "scale", "x", axes, 1, n)]
    if center:
        args.append(_vector(node, graph, "mean", "x", batch, n, m))
    args += [_vector(node, graph, "inv_variance", "x", batch, n, m), Arg("dx", (m, n), (n, 1)), *partials]
    prefix = "layernorm_backward" if center else "rmsnorm_backward"
    launches = [
        Launch(
            KernelSource(prefix, row_kernel_source.norm_backward(n, tm, tn, center, dbias, hints, config.paired, k=k)),
            (blocks,),
            tuple(args),
        )
    ]
    tc = min(pow2(n), config.columns)
    tg = min(pow2(blocks), max(1, 4096 // tc))
    outs = [_vector(node, graph, p, "x", axes, 1, n) for p in ("dscale", "dbias")[: len(partials)]]
    sums = tuple(a for pair in zip(partials, outs, strict=True) for a in pair)
    text = row_kernel_source.column_sums(tg, tc, len(partials))
    launches.append(Launch(KernelSource("column_sums", text), (cdiv(n, tc),), sums))
    return launches, work.nbytes


class CutileLayernormBuilder(CutileLaunchesBuilder):
    name = "cutile.layernorm"
    engine_id = IN_TREE[name]
    ops = ("layernorm",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        return forward(node, graph, center=True)


class CutileRmsnormBuilder(CutileLaunchesBuilder):
    name = "cutile.rmsnorm"
    engine_id = IN_TREE[name]
    ops = ("rmsnorm",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        return forward(node, graph, center=False)


class CutileLayernormBackwardBuilder(CutileLaunchesBuilder):
    name = "cutile.layernorm_backward"
    engine_id = IN_TREE[name]
    ops = ("layernorm_backward",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        return backward(node, graph, center=True)


class CutileRmsnormBackwardBuilder(CutileLaunchesBuilder):
    name = "cutile.rmsnorm_backward"
    engine_id = IN_TREE[name]
    ops = ("rmsnorm_backward",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        return backward(node, graph, center=False)
