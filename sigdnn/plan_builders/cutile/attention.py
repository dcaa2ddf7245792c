"""cuTile attention forward (``_attention_kernels.py``): the sdpa nodes the CuTe flash attention declines.

The CuTe kernel takes 16-bit q / k / v with head dims 64 or 128. Users also
run float32 attention (a float32 torch model, an ONNX Attention node) and
head dims of 32, 80, 96, 160 or 256; this builder takes those: head dims up
to 256 (q / k and v apart; tiles are the next power of two, the rest read
as 0), f32 / f16 / bf16, any strides, grouped-query heads, the top-left
causal mask, and the stats output. One block owns 64 query rows of one
(batch, head) and walks the keys 64 at a time with an online softmax in
float32. It declines a bias, padding masks and ragged tensors, and a
compute dtype other than float32. It ranks below cute.sdpa.
"""

from __future__ import annotations

from importlib import resources

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cutile.conv_grouped import GRID_Y, MARKER
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.source import KernelSource
from sigdnn.plan_builders.cutile.steps import Arg, Launch
from sigdnn.plan_builders.cutile.tiling import cdiv, pow2
from sigdnn.registry.engine_ids import IN_TREE

TILE_ROWS = 64  # TM: query rows a block owns
TILE_KEYS = 64  # TN: keys a step reads
MAX_HEAD_DIM = 256
NARROW = ("float16", "bfloat16")


def kernel_source() -> KernelSource:
    text = resources.files("sigdnn.plan_builders.cutile").joinpath("_attention_kernels.py").read_text()
    return KernelSource("attention", text.split(MARKER, 1)[1] + "\nkernel = attention\n")


class CutileSdpaBuilder(CutileLaunchesBuilder):
    name = "cutile.sdpa"
    engine_id = IN_TREE[name]
    ops = ("sdpa",)
    priority = -1  # below cute.sdpa where it applies

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        for port in ("bias", "seq_len_q", "seq_len_kv", "q_ragged_offset", "k_ragged_offset", "v_ragged_offset",
                     "o_ragged_offset"):  # fmt: skip
            if getattr(op, port) is not None:
                raise ValueError(f"{self.name} takes no {port}")
        compute = str(graph.compute_dtype_of(node))
        if compute != "float32":
            raise ValueError(f"compute dtype {compute}; {self.name} computes in float32")
        q, k, v, o = (graph.tensors[getattr(op, p)] for p in ("q", "k", "v", "o"))
        batch, heads, sq, d = q.dims
        kv_heads, skv, dv = k.dims[1], k.dims[2], v.dims[3]
        if max(d, dv) > MAX_HEAD_DIM:
            raise ValueError(f"head dims {d} (q, k) and {dv} (v): {self.name} takes up to {MAX_HEAD_DIM}")
        grid = (cdiv(sq, TILE_ROWS), batch * heads, 1)
        if grid[1] > GRID_Y:
            raise ValueError(f"{batch} x {heads} (batch x heads) blocks past a grid's {GRID_Y}")
        stats = graph.tensors[op.stats] if op.stats is not None else None
        narrow_p = str(graph.dtype_of(v)) in NARROW
        constants = (heads, heads // kv_heads, sq, skv, float(op.attn_scale))
        tiles = (TILE_ROWS, TILE_KEYS, max(16, pow2(d)), max(16, pow2(dv)), op.use_causal_mask, stats is not None,
                 narrow_p)  # fmt: skip
        args = [Arg(p, t.dims, t.strides) for p, t in zip("qkvo", (q, k, v, o))]
        args.append(Arg("stats", stats.dims, stats.strides) if stats is not None else Arg("o", o.dims, o.strides))
        return [Launch(kernel_source(), grid, tuple(args), (*constants, *tiles))], 0
