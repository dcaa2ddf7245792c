"""cuTile attention, forward and backward (``_attention_kernels.py``): the sdpa nodes the CuTe flash attention
declines.

The CuTe kernel takes 16-bit q / k / v with head dims 64 or 128. Users also
run float32 attention (a float32 torch model, an ONNX Attention node) and
head dims of 32, 80, 96, 160 or 256; this builder takes those: head dims up
to 256 (q / k and v apart; tiles are the next power of two, the rest read
as 0), f32 / f16 / bf16, any strides, grouped-query heads, the top-left
causal mask, and the stats output. One block owns 64 query rows of one
(batch, head) and walks the keys 64 at a time with an online softmax in
float32. The backward recomputes p from the forward's stats, a launch for
dq and one for dk and dv. Both take padding masks (``seq_len_q`` /
``seq_len_kv``: rows and keys past a batch entry's lengths take no part and
are read as 0, whatever the padding holds; a row with no key gets o = 0)
and decline a bias and ragged tensors, and a compute dtype other than
float32; both rank below the CuTe attention (its priority 2).
"""

from __future__ import annotations

from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import span_elements
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cutile.conv_grouped import GRID_Y
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.source import KernelSource, literal
from sigdnn.plan_builders.cutile.steps import Arg, Launch
from sigdnn.plan_builders.cutile.tiling import cdiv, pow2
from sigdnn.registry.engine_ids import IN_TREE

TILE_ROWS = 64  # TM: query rows a block owns
TILE_KEYS = 64  # TN: keys a step reads
MAX_HEAD_DIM = 256
NARROW = ("float16", "bfloat16")


def kernel_source(kernel: str = "attention") -> KernelSource:
    """The literal kernels' text with ``kernel`` bound to the one named."""
    return literal("_attention_kernels.py", kernel, kernel)


def shape_of(builder: str, node: Node, graph: Graph) -> tuple[int, int, int, int, int, int, int]:
    """(batch, heads, kv heads, Sq, Skv, head dim of q / k, of v); ValueError for what the kernels do not take."""
    op = node.op
    if op.bias is not None:  # (ragged offsets, int tensors outside ``index_ports``, the base class declines)
        raise ValueError(f"{builder} takes no bias")
    for port in ("seq_len_q", "seq_len_kv"):
        lengths = getattr(op, port)
        t = graph.tensors[lengths] if lengths is not None else None
        if t is not None and span_elements(t.dims, t.strides) != t.size:
            raise ValueError(f"{builder} reads {port} as packed")
    compute = str(graph.compute_dtype_of(node))
    if compute != "float32":
        raise ValueError(f"compute dtype {compute}; {builder} computes in float32")
    q, k, v = (graph.tensors[getattr(op, p)] for p in ("q", "k", "v"))
    batch, heads, sq, d = q.dims
    kv_heads, skv, dv = k.dims[1], k.dims[2], v.dims[3]
    if max(d, dv) > MAX_HEAD_DIM:
        raise ValueError(f"head dims {d} (q, k) and {dv} (v): {builder} takes up to {MAX_HEAD_DIM}")
    if batch * heads > GRID_Y:
        raise ValueError(f"{batch} x {heads} (batch x heads) blocks past a grid's {GRID_Y}")
    return batch, heads, kv_heads, sq, skv, d, dv


def port_view(node: Node, graph: Graph, port: str) -> Arg:
    """The kernel argument of a port: its tensor as declared (4-D, its strides)."""
    t = graph.tensors[getattr(node.op, port)]
    return Arg(port, t.dims, t.strides)


def length_args(node: Node, graph: Graph) -> tuple[tuple[Arg, Arg], bool]:
    """The two length arrays as flat views (q's view twice where the node has none: never read), and whether
    the node has them. A node has both or neither (the op's rule for padding masks)."""
    op = node.op
    if op.seq_len_q is None:
        return (port_view(node, graph, "q"), port_view(node, graph, "q")), False
    found = tuple(Arg(p, (graph.tensors[getattr(op, p)].size,), (1,)) for p in ("seq_len_q", "seq_len_kv"))
    return found, True  # type: ignore[return-value]


def tile_of(d: int) -> int:
    """A head dim's tile: the next power of two, at least ct.mma's 16."""
    return max(16, pow2(d))


class CutileSdpaBuilder(CutileLaunchesBuilder):
    name = "cutile.sdpa"
    engine_id = IN_TREE[name]
    ops = ("sdpa",)
    index_ports = frozenset({"seq_len_q", "seq_len_kv"})

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        batch, heads, kv_heads, sq, skv, d, dv = shape_of(self.name, node, graph)
        narrow_p = str(graph.dtype_of(graph.tensors[op.v])) in NARROW
        constants = (heads, heads // kv_heads, sq, skv, float(op.attn_scale))
        lengths, has_lengths = length_args(node, graph)
        has_stats = op.stats is not None
        tiles = (TILE_ROWS, TILE_KEYS, tile_of(d), tile_of(dv), op.use_causal_mask, has_stats, narrow_p, has_lengths)
        ports = ("q", "k", "v", "o", "stats" if has_stats else "o")  # o stands in for stats never written
        args = (*(port_view(node, graph, p) for p in ports), *lengths)
        grid = (cdiv(sq, TILE_ROWS), batch * heads, 1)
        return [Launch(kernel_source(), grid, args, (*constants, *tiles))], 0


class CutileSdpaBackwardBuilder(CutileLaunchesBuilder):
    """dq in one launch (a block per query tile, as the forward), dk and dv in another (a block per key tile
    walking the query tiles of its group's heads), both recomputing p from the forward's stats in float32."""

    name = "cutile.sdpa_backward"
    engine_id = IN_TREE[name]
    ops = ("sdpa_backward",)
    index_ports = frozenset({"seq_len_q", "seq_len_kv"})

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        batch, heads, kv_heads, sq, skv, d, dv = shape_of(self.name, node, graph)
        constants = (heads, heads // kv_heads, sq, skv, float(op.attn_scale))
        lengths, has_lengths = length_args(node, graph)
        ins = (*(port_view(node, graph, p) for p in ("q", "k", "v", "o", "d_o", "stats")), *lengths)
        outs = {p: port_view(node, graph, p) for p in ("dq", "dk", "dv")}
        tiles = (TILE_ROWS, TILE_KEYS, tile_of(d), tile_of(dv), op.use_causal_mask, has_lengths)
        return [
            Launch(kernel_source("attention_dq"), (cdiv(sq, TILE_ROWS), batch * heads, 1), (*ins, outs["dq"]),
                   (*constants, *tiles)),
            Launch(kernel_source("attention_dkdv"), (cdiv(skv, TILE_KEYS), batch * kv_heads, 1),
                   (*ins, outs["dk"], outs["dv"]), (*constants, *tiles)),
        ], 0  # fmt: skip
