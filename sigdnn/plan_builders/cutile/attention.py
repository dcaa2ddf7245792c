"""cuTile attention, forward and backward (``_attention_kernels.py``): the sdpa nodes the CuTe flash attention
declines.

The CuTe kernel takes 16-bit q / k / v with head dims 64 or 128. Users also
run float32 attention (a float32 torch model, an ONNX Attention node) and
head dims of 32, 80, 96, 160 or 256; this builder takes those: head dims up
to 256 (q / k and v apart; tiles are the next power of two, the rest read
as 0), f32 / f16 / bf16, any strides, grouped-query heads, the stats
output, and every diagonal band (the causal mask, sliding windows, either
alignment; the CuTe kernel takes only the top-left causal mask). One block owns 64 query rows of one
(batch, head) and walks the keys 64 at a time with an online softmax in
float32. The backward recomputes p from the forward's stats, a launch for
dq and one for dk and dv. Both take padding masks (``seq_len_q`` /
``seq_len_kv``: rows and keys past a batch entry's lengths take no part and
are read as 0, whatever the padding holds; a row with no key gets o = 0; the
loops stop at each sequence's lengths, clamped to [0, S] on the device)
and ragged (token-packed) tensors: each is unpacked into a padded copy in
the step's workspace before the attention launches and each ragged output
packed back after them (``_ragged_kernels.py``), so only positions inside
the sequences are written. They decline a bias and a compute dtype other
than float32; both rank below the CuTe attention (its priority 2).
"""

from __future__ import annotations

from collections.abc import Mapping

from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import span_elements
from sigdnn.graph.node import Node
from sigdnn.graph.ops.ragged import GRADIENT_OF, OFFSET_SUFFIX, RAGGED_TENSORS
from sigdnn.graph.ops.sdpa import RAGGED_LENGTHS, Band
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.cutile.conv_gemm import require_int32_spans
from sigdnn.plan_builders.cutile.conv_grouped import GRID_Y
from sigdnn.plan_builders.cutile.launches_builder import CutileLaunchesBuilder
from sigdnn.plan_builders.cutile.source import KernelSource, literal
from sigdnn.plan_builders.cutile.steps import Arg, Launch, Workspace
from sigdnn.plan_builders.cutile.tiling import cdiv, pow2
from sigdnn.registry.engine_ids import IN_TREE

TILE_ROWS = 64  # TM: query rows a block owns
TILE_KEYS = 64  # TN: keys a step reads
MAX_HEAD_DIM = 256
NARROW = ("float16", "bfloat16")
RAGGED_ROWS = 64  # rows of one (batch, head) an unpack or pack block moves
INDEX_PORTS = frozenset({"seq_len_q", "seq_len_kv", *(p + OFFSET_SUFFIX for p in RAGGED_TENSORS)})
FORWARD_PLACEMENT = {p: p for p in RAGGED_TENSORS}  # port -> the forward tensor whose ragged offsets place it
BACKWARD_PLACEMENT = {**{p: p for p in RAGGED_TENSORS}, **GRADIENT_OF}


def wide(graph: Graph, *uids: int) -> bool:
    """Whether these operands go to the MMA as float32: unless they share one 16-bit dtype (the tensor cores'
    bf16 / f16 products are exact in the float32 sums either way; widening only costs the tensor cores' speed)."""
    dtypes = {str(graph.dtype_of(graph.tensors[u])) for u in uids}
    return not (len(dtypes) == 1 and dtypes <= set(NARROW))


def kernel_source(kernel: str = "attention") -> KernelSource:
    """The literal kernels' text with ``kernel`` bound to the one named."""
    return literal("_attention_kernels.py", kernel, kernel)


def shape_of(builder: str, node: Node, graph: Graph) -> tuple[int, int, int, int, int, int, int]:
    """(batch, heads, kv heads, Sq, Skv, head dim of q / k, of v); ValueError for what the kernels do not take."""
    op = node.op
    if op.bias is not None:
        raise ValueError(f"{builder} takes no bias")
    for port in sorted(INDEX_PORTS):
        uid = getattr(op, port)
        t = graph.tensors[uid] if uid is not None else None
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


def band_args(node: Node, graph: Graph) -> tuple[tuple[int, int], tuple[bool, bool, bool]]:
    """((left, right), (LEFT, RIGHT, BOTTOM_RIGHT)): the node's band as the kernels take it. A bound past
    +-(Sq + Skv) hides every key or none (the alignment lies in [-Sq, Skv]), so each is clamped there and the
    kernels' index sums stay inside int32."""
    band = Band.of(node.op)
    q, k = graph.tensors[node.op.q], graph.tensors[node.op.k]
    reach = q.dims[2] + k.dims[2]
    left = 1 if band.left is None else min(band.left, reach)
    right = 0 if band.right is None else max(-reach, min(band.right, reach))
    return (left, right), (band.left is not None, band.right is not None, band.bottom_right)


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


def ragged_kernel(kernel: str) -> KernelSource:
    """The pack / unpack kernels' text (``_ragged_kernels.py``) with ``kernel`` bound to the one named."""
    return literal("_ragged_kernels.py", kernel, kernel)


def row_view(port: str, t: Tensor) -> Arg:
    """A ragged tensor's buffer (t.size elements) as (1, H, rows, E): rows ``step`` = stride_s apart (1 for a
    sequence dim of one, which may carry any stride), as many as end inside the buffer with every head and element,
    so that a slice of whole rows never reaches past it."""
    _, heads, _, dim = t.dims
    _, stride_h, stride_s, stride_e = t.strides
    step = max(stride_s, 1)
    rows = (t.size - 1 - (heads - 1) * stride_h - (dim - 1) * stride_e) // step + 1
    return Arg(port, (1, heads, max(rows, 0), dim), (t.size, stride_h, step, stride_e))


def port_views(
    node: Node, graph: Graph, ports: tuple[str, ...], placement: Mapping[str, str], outputs: frozenset[str]
) -> tuple[dict[str, Arg], list[Launch], list[Launch], int]:
    """Each port's kernel argument, and what it takes: a port a ragged offset places is a padded [B, H, S, E]
    copy in the workspace, with a launch that unpacks it (an input) or packs it back (one of ``outputs``);
    any other port is its tensor as declared. Returns (views, unpacks, packs, workspace bytes).

    ``placement``: port -> the forward tensor (q, k, v, o) whose ragged offsets and lengths place it.
    """
    op = node.op
    workspace = Workspace()
    views = {p: port_view(node, graph, p) for p in ports}
    unpack: list[Launch] = []
    pack: list[Launch] = []
    for port, placer in placement.items():
        if getattr(op, placer + OFFSET_SUFFIX) is None:
            continue
        t = graph.tensors[getattr(op, port)]
        require_int32_spans(t)
        batch, heads, seq, dim = t.dims
        padded = views[port] = workspace.take(t.dims, graph.dtype_of(t).value)
        packed, rows = Arg(port, (t.size,), (1,)), row_view(port, t)
        # each sequence's offset and length (the offsets' last element, their total, is not read)
        index = tuple(Arg(p, (batch,), (1,)) for p in (placer + OFFSET_SUFFIX, RAGGED_LENGTHS[placer]))
        constants = (heads, seq, dim, *t.strides[1:], rows.strides[2], RAGGED_ROWS, pow2(dim))
        grid = (cdiv(seq, RAGGED_ROWS), batch * heads, 1)
        if port in outputs:
            pack.append(Launch(ragged_kernel("ragged_pack"), grid, (padded, *index, packed, rows), constants))
        else:
            unpack.append(Launch(ragged_kernel("ragged_unpack"), grid, (packed, rows, *index, padded), constants))
    return views, unpack, pack, workspace.nbytes


class CutileSdpaBuilder(CutileLaunchesBuilder):
    name = "cutile.sdpa"
    engine_id = IN_TREE[name]
    ops = ("sdpa",)
    index_ports = INDEX_PORTS

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        batch, heads, kv_heads, sq, skv, d, dv = shape_of(self.name, node, graph)
        narrow_p = str(graph.dtype_of(graph.tensors[op.v])) in NARROW
        bounds, band = band_args(node, graph)
        constants = (heads, heads // kv_heads, sq, skv, float(op.attn_scale), *bounds)
        lengths, has_lengths = length_args(node, graph)
        has_stats = op.stats is not None
        flags = (*band, has_stats, narrow_p, has_lengths, wide(graph, op.q, op.k))
        tiles = (TILE_ROWS, TILE_KEYS, tile_of(d), tile_of(dv), *flags)
        ports = ("q", "k", "v", "o", "stats" if has_stats else "o")  # o stands in for stats never written
        view, unpack, pack, workspace = port_views(node, graph, ports, FORWARD_PLACEMENT, frozenset({"o"}))
        args = (*(view[p] for p in ports), *lengths)
        grid = (cdiv(sq, TILE_ROWS), batch * heads, 1)
        return [*unpack, Launch(kernel_source(), grid, args, (*constants, *tiles)), *pack], workspace


class CutileSdpaBackwardBuilder(CutileLaunchesBuilder):
    """dq in one launch (a block per query tile, as the forward), dk and dv in another (a block per key tile
    walking the query tiles of its group's heads), both recomputing p from the forward's stats in float32; with
    q, k, v and d_o of one 16-bit dtype the MMAs take that dtype (p and ds rounded to it, as flash attention)."""

    name = "cutile.sdpa_backward"
    engine_id = IN_TREE[name]
    ops = ("sdpa_backward",)
    index_ports = INDEX_PORTS

    def launches(self, node: Node, graph: Graph) -> tuple[list[Launch], int]:
        op = node.op
        batch, heads, kv_heads, sq, skv, d, dv = shape_of(self.name, node, graph)
        bounds, band = band_args(node, graph)
        constants = (heads, heads // kv_heads, sq, skv, float(op.attn_scale), *bounds)
        lengths, has_lengths = length_args(node, graph)
        reads, grads = ("q", "k", "v", "o", "d_o", "stats"), ("dq", "dk", "dv")
        view, unpack, pack, workspace = port_views(node, graph, reads + grads, BACKWARD_PLACEMENT, frozenset(grads))
        ins = (*(view[p] for p in reads), *lengths)
        widened = wide(graph, op.q, op.k, op.v, op.d_o)
        tiles = (TILE_ROWS, TILE_KEYS, tile_of(d), tile_of(dv), *band, has_lengths, widened)
        return [
            *unpack,
            Launch(kernel_source("attention_dq"), (cdiv(sq, TILE_ROWS), batch * heads, 1), (*ins, view["dq"]),
                   (*constants, *tiles)),
            Launch(kernel_source("attention_dkdv"), (cdiv(skv, TILE_KEYS), batch * kv_heads, 1),
                   (*ins, view["dk"], view["dv"]), (*constants, *tiles)),
            *pack,
        ], workspace  # fmt: skip
