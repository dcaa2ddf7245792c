"""cuTile batchnorm: inference, training (with running statistics) and backward, NCHW, NHWC or any packed order.

x is (A, C, B) around its channel axis (``tensor_views.channels``); y, dy and dx
laid out as x; per-channel tensors any stride. Training and backward are
three launches (``channel_kernel_source``): partial sums split over A, a finalize per
channel that writes the node's per-channel outputs and float32
coefficients into the workspace, and the elementwise pass. Inference is
the elementwise pass alone.
"""

from __future__ import annotations

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders import tensor_views
from sigdnn.plan_builders.cutile import channel_kernel_source
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.row_kernel_source import KernelHints
from sigdnn.plan_builders.cutile.source import KernelSource
from sigdnn.plan_builders.cutile.steps import Arg, Launch, Workspace
from sigdnn.plan_builders.cutile.tiling import SPLIT_BLOCKS, cdiv, pow2
from sigdnn.registry.engine_ids import IN_TREE


@attrs.frozen
class ChannelConfig:
    """How one batchnorm direction is cut: elements of a (TA, TK, TB) tile, the partial sums' lanes, cuTile hints."""

    tile: int
    lanes: str = "float64"  # dtype of each lane's partial sums (``channel_kernel_source.partials``)
    hints: KernelHints = attrs.field(factory=KernelHints)  # of the partial-sum and elementwise passes
    final_tile: int = 8  # channels per finalize block (many blocks: one adding every partial row ran long)
    final_elems: int = 1024  # elements of the finalize's (rows, channels) tile of float64 partial sums
    apply_tile: int | None = None  # elements of the elementwise pass's tile (None: ``tile``)
    apply_hints: KernelHints | None = None  # of the elementwise pass (None: ``hints``)
    tma: bool = True  # whether the partial pass may load x (and dy) through TMA
    latency: int | None = None  # the partial pass's DRAM latency hint for those loads (1 to 10; None: cuTile's)
    blocks: int | None = None  # blocks the partial pass aims at (None: SPLIT_BLOCKS)
    channels: int | None = None  # most channels in one tile (None: as many as fit)


# Measured on the H200 (NHWC 64x256x56x56 bf16; the rest in docs/experiments.md): training
# statistics in float32 lanes over 4096-element tiles with registers for 4 blocks per SM ran 1.47x faster
# than float64 lanes over 8192 elements (1.69 against 1.15 TB/s); float64 lanes lost beyond 8192 (registers).
# The finalize in blocks of 8 channels (32 blocks, not one adding all 523 x 256 partial rows): 1.69 -> 1.99 TB/s.
# Round 3: the partial pass's loop without a guard is pipelined (7 TMA stages of a
# 2048-element tile; 4096 spilled and got 2): 37.6 -> 35.0 us. The elementwise pass at 4096 elements with unchecked
# loads and stores (exact tiles): 64.2 -> 54.7 us (2048: 53.4, 8192: 55.5, 1024: 62.3). 1.99 -> 2.23 TB/s.
# Round 5: the partial pass in 264 blocks (2 a SM) of 4096-element tiles with
# registers for 2 blocks: 34.6 -> 30.3 us, faster than torch's own sum of x (32.4 us) though not at the device's
# read rate (a CUDA C kernel reads x in 24.8 us); 2.23 -> 2.36 TB/s. Twice the blocks
# lost (40.3 us), one a SM no better (29.8 us).
# Round 9: one block a SM with 10 TMA stages of x (latency hint 6; 5 stages without):
# 87.6-87.8 -> 86.3-86.4 us in two calls, 2.34-2.35 -> 2.38 TB/s (hints 4, 8 and 10, or none, no faster).
TRAINING = ChannelConfig(
    4096,
    "float32",
    KernelHints(occupancy=1),
    apply_tile=4096,
    apply_hints=KernelHints(occupancy=4),
    latency=6,
    blocks=132,
)  # training forward
INFERENCE = ChannelConfig(8192)  # the elementwise pass alone
# Backward, measured on the H100 against torch's batchnorm backward over ResNet-50's six heaviest shapes (batch 64,
# NHWC bf16, weighted by occurrence): training's cut 2.18 ms (1.72x torch), float64 lanes in that cut 2.65 (1.42x),
# float64 lanes over 8192 elements 3.02 (1.25x). Float32 lanes are the graph's compute dtype, as torch and cuDNN sum.
BACKWARD = TRAINING


def tiles(a: int, c: int, b: int, tile: int, channels: int | None = None) -> tuple[int, int, int]:
    """(TA, TK, TB): as much of the contiguous B as fits (up to 2048), then channels (up to ``channels`` when
    given), then A, ``tile`` in all."""
    tb = min(pow2(b), 2048)
    tk = min(pow2(c), max(1, 4096 // tb))
    if channels is not None:
        tk = min(tk, channels)
    return min(pow2(a), max(1, tile // (tb * tk))), tk, tb


class _Layout:
    """The node's x as (A, C, B) with its tiles, and views of its tensors."""

    def __init__(self, node: Node, graph: Graph, x_port: str, like: tuple[str, ...], config: ChannelConfig) -> None:
        ports = node.op.ports()
        self.ports = ports
        self.graph = graph
        x = graph.tensors[ports[x_port]]
        self.a, self.c, self.b = tensor_views.channels(x)
        tensor_views.same_layout(x, [graph.tensors[ports[p]] for p in like if p in ports])
        self.config = config
        self.flat = self.b == 1  # channels innermost: (A, C) views and tiles (see channel_kernel_source)
        self.tile, self.shape = self._cut(config.tile)
        self.apply_tile, self.apply_shape = self._cut(config.apply_tile or config.tile)
        self.count = self.a * self.b

    def _cut(self, elements: int) -> tuple[tuple[int, ...], tuple[int, int, int]]:
        """The (TA, TK, TB) tile of about ``elements`` ((TA, TK) when flat) and the grid of tiles over x."""
        tile = tiles(self.a, self.c, self.b, elements, self.config.channels)
        shape = (cdiv(self.a, tile[0]), cdiv(self.c, tile[1]), cdiv(self.b, tile[2]))
        return (tile[:2] if self.flat else tile), shape

    def _divides(self, tile: tuple[int, ...]) -> bool:
        """Whether tiles of this shape cover x exactly (their loads and stores need no bounds checks)."""
        ta, tk, tb = (*tile, 1)[:3]
        return self.a % ta == 0 and self.c % tk == 0 and self.b % tb == 0

    def x(self, port: str) -> Arg:
        if self.flat:
            return Arg(port, (self.a, self.c), (self.c, 1))
        return Arg(port, (self.a, self.c, self.b), (self.c * self.b, self.b, 1))

    def vector(self, port: str) -> Arg:
        return Arg(port, (self.c,), (tensor_views.channel_stride(self.graph.tensors[self.ports[port]]),))

    def apply(self, args: list[Arg], grads: bool, wide: bool = False, split_mean: bool = False) -> Launch:
        at, kt, bt = self.apply_shape
        hints = self.config.apply_hints or self.config.hints
        text = channel_kernel_source.apply(
            self.apply_tile, self.apply_shape, grads, wide, hints, self._divides(self.apply_tile), split_mean
        )
        return Launch(KernelSource("batchnorm_apply", text), (at * kt * bt,), tuple(args))

    def partials(self, args: list[Arg], work: Workspace, grads: bool) -> tuple[Launch, list[Arg]]:
        at, kt, _ = self.shape
        splits = max(1, min(at, (self.config.blocks or SPLIT_BLOCKS) // kt))
        per = cdiv(at, splits)
        splits = cdiv(at, per)
        sums = [work.take((splits, self.c), "float64") for _ in range(2)]
        options = channel_kernel_source.load_options(self.config.tma, self.config.latency)
        config, exact = self.config, self._divides(self.tile)
        text = channel_kernel_source.partials(
            self.tile, self.a, self.b, splits, grads, config.lanes, config.hints, options, exact
        )
        return Launch(KernelSource("batchnorm_partials", text), (kt, splits), (*args, *sums)), sums

    def finalize_tiles(self, splits: int) -> tuple[int, int]:
        tk = min(pow2(self.c), self.config.final_tile)
        return tk, min(pow2(splits), max(1, self.config.final_elems // tk))


class CutileBatchnormInferenceBuilder(CutileLaunchesBuilder):
    name = "cutile.batchnorm_inference"
    engine_id = IN_TREE[name]
    ops = ("batchnorm_inference",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        lay = _Layout(node, graph, "x", ("y",), INFERENCE)
        args = [lay.x("x"), *(lay.vector(p) for p in ("mean", "inv_variance", "scale", "bias")), lay.x("y")]
        return [lay.apply(args, grads=False, wide=True)], 0


class CutileBatchnormBuilder(CutileLaunchesBuilder):
    name = "cutile.batchnorm"
    engine_id = IN_TREE[name]
    ops = ("batchnorm",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        lay = _Layout(node, graph, "x", ("y",), TRAINING)
        if op.momentum is not None and lay.count < 2:
            raise ValueError(f"{lay.count} element per channel: its unbiased running variance is undefined")
        work = Workspace()
        first, sums = lay.partials([lay.x("x")], work, grads=False)
        splits = sums[0].shape[0]
        tk, ts = lay.finalize_tiles(splits)
        mean, inv, low = work.take((lay.c,)), work.take((lay.c,)), work.take((lay.c,))
        args = [lay.x("x"), *sums, lay.vector("mean"), lay.vector("inv_variance"), mean, inv, low]
        if op.momentum is not None:
            args += [
                lay.vector(p) for p in ("in_running_mean", "in_running_var", "next_running_mean", "next_running_var")
            ]
        text = channel_kernel_source.finalize_stats(tk, ts, lay.count, op.epsilon, op.momentum, lay.flat)
        final = Launch(KernelSource("batchnorm_finalize", text), (cdiv(lay.c, tk),), tuple(args))
        last = lay.apply([lay.x("x"), mean, low, inv, lay.vector("scale"), lay.vector("bias"), lay.x("y")], grads=False,
                         split_mean=True)  # fmt: skip
        return [first, final, last], work.nbytes


class CutileBatchnormBackwardBuilder(CutileLaunchesBuilder):
    name = "cutile.batchnorm_backward"
    engine_id = IN_TREE[name]
    ops = ("batchnorm_backward",)

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        lay = _Layout(node, graph, "x", ("dy", "dx"), BACKWARD)
        work = Workspace()
        stats = [lay.vector("mean"), lay.vector("inv_variance")]
        first, sums = lay.partials([lay.x("dy"), lay.x("x"), *stats], work, grads=True)
        tk, ts = lay.finalize_tiles(sums[0].shape[0])
        c1, c2 = work.take((lay.c,)), work.take((lay.c,))
        text = channel_kernel_source.finalize_grads(tk, ts, lay.count)
        args = (*sums, lay.vector("dscale"), lay.vector("dbias"), c1, c2)
        final = Launch(KernelSource("batchnorm_finalize_grads", text), (cdiv(lay.c, tk),), args)
        last = lay.apply([lay.x("dy"), lay.x("x"), *stats, lay.vector("scale"), c1, c2, lay.x("dx")], grads=True)
        return [first, final, last], work.nbytes
