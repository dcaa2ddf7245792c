"""cuTile reduction: every mode of docs/ops.md over the axes where y's dim is 1, for any strides (``reduction_kernel_source``).

One launch when there are enough outputs to fill the GPU; otherwise the
reduced range is split over blocks writing float32 partials to the
workspace and a second launch of the same kernel combines and finishes them.
Float io and float32 compute only: integer reductions stay on the reference.
"""

from __future__ import annotations

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import packed_strides, span_elements
from sigdnn.graph.node import Node
from sigdnn.graph.ops.reduction import Reduction
from sigdnn.plan_builders import tensor_views
from sigdnn.plan_builders.cutile import reduction_kernel_source
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.reduction_kernel_source import MODES, ReduceSpec
from sigdnn.plan_builders.cutile.source import KernelSource
from sigdnn.plan_builders.cutile.steps import Arg, Launch, Workspace
from sigdnn.plan_builders.cutile.tiling import SPLIT_BLOCKS, cdiv, pow2
from sigdnn.registry.engine_ids import IN_TREE

TILE = 4096  # elements of one (TK, TR) gathered tile
CHUNK = 1024  # longest run of reduced elements one tile takes


def tiles(kept: int, count: int) -> tuple[int, int]:
    tr = min(pow2(count), CHUNK)
    return min(pow2(kept), max(1, TILE // tr)), tr


class CutileReductionBuilder(CutileLaunchesBuilder):
    name = "cutile.reduction"
    engine_id = IN_TREE[name]
    ops = ("reduction",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op: Reduction = node.op
        x, y = graph.tensors[op.x], graph.tensors[op.y]
        kd, kx, ky, rd, rx = tensor_views.reduction(x, y)
        kept, count = y.size, x.size // y.size
        transform, combine, finish = MODES[op.mode]
        tk, tr = tiles(kept, count)
        k_tiles, chunks = cdiv(kept, tk), cdiv(count, tr)
        splits = max(1, min(chunks, SPLIT_BLOCKS // k_tiles))
        per = cdiv(chunks, splits)
        splits = cdiv(chunks, per)
        x_arg = Arg("x", (span_elements(x.dims, x.strides),), (1,))
        y_arg = Arg("y", (span_elements(y.dims, y.strides),), (1,))
        if splits == 1:
            spec = ReduceSpec(
                kd, kx, ky, rd, rx, count, (tk, tr), per, transform, combine, finish, partial=False, total=count
            )
            return [
                Launch(KernelSource("reduction", reduction_kernel_source.generate(spec)), (k_tiles, 1), (x_arg, y_arg))
            ], 0
        work = Workspace()
        width = k_tiles * tk
        partials = work.take((splits, width))
        flat_partials = attrs.evolve(partials, shape=(splits * width,), strides=(1,))  # what the gather reads
        first = ReduceSpec(
            kd, kx, ky, rd, rx, count, (tk, tr), per, transform, combine, None, partial=True, total=count
        )
        tk2, tr2 = tiles(kept, splits)
        flat = packed_strides(kd)
        second = ReduceSpec(kd, flat, ky, (splits,), (width,), splits, (tk2, tr2), cdiv(splits, tr2), "x", combine,
                            finish, partial=False, total=count)  # fmt: skip
        return [
            Launch(
                KernelSource("reduction", reduction_kernel_source.generate(first)), (k_tiles, splits), (x_arg, partials)
            ),
            Launch(
                KernelSource("reduction", reduction_kernel_source.generate(second)),
                (cdiv(kept, tk2), 1),
                (flat_partials, y_arg),
            ),
        ], work.nbytes
