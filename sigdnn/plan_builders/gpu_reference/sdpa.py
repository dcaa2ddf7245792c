"""GPU reference scaled dot-product attention, forward and backward: the full score matrix, no online softmax.

q [B, Hq, Sq, D], k [B, Hkv, Skv, D], v [B, Hkv, Skv, Dv]; query head h reads
kv head h // (Hq / Hkv). s = attn_scale * q k^T (+ bias), the keys outside
the diagonal band (graph/ops/sdpa.py's ``Band``: the causal mask, left and
right bounds, either alignment) masked to -inf; o = softmax(s) v, a row of
only -inf giving o = 0 and stats = -inf; stats = max + log(sum). Backward:
p = exp(s - stats), dv = p^T do, dp = do v^T, ds = (dp - rowsum(do * o)) p
attn_scale, dq = ds k, dk = ds^T q, dk and dv summed over the query heads
sharing a kv head. Every product is a float64 GEMM; the scores are whole
[Sq, Skv] matrices per head. Variable lengths (``varlen.py``): keys past
seq_len_kv and padding query rows are masked like the causal keys (a padding
row: o = 0, stats = -inf, dq = 0), padding rows of every operand read as 0,
and ragged tensors are unpacked to the padded form and packed back.
"""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.sdpa import VARLEN_PORTS, Band
from sigdnn.plan_builders.declines import decline_non_float
from sigdnn.plan_builders.gpu_reference.arrays import Array, row_major_index, where
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.plan_builders.gpu_reference.varlen import Varlen
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device


def per_query_head(kv: Array, hq: int) -> Array:
    """A kv tensor [B, Hkv, S, D] repeated to [B, Hq, S, D] (query head h reads kv head h // G)."""
    heads = np.arange(hq) // (hq // kv.shape[1])
    return kv.take(row_major_index(kv.shape)[:, heads])


def bmm(a: Array, b: Array, transpose_b: bool = False) -> Array:
    """[B, H, M, K] @ [B, H, K, N] (or b given as [B, H, N, K] with transpose_b) -> [B, H, M, N]."""
    lead = a.shape[:2]
    if transpose_b:
        b = b.transpose(0, 1, 3, 2)
    flat = math.prod(lead)
    c = a.reshape(flat, *a.shape[2:]).matmul(b.reshape(flat, *b.shape[2:]))
    return c.reshape(*lead, *c.shape[1:])


def scores(q: Array, k: Array, bias: Array | None, attn_scale: float, hidden: Array | None) -> Array:
    """attn_scale * q k^T (+ bias), -inf where ``hidden`` ([B, 1, Sq, Skv], ``Varlen.hidden``) is nonzero."""
    s = bmm(q, k, transpose_b=True) * attn_scale
    if bias is not None:
        s = s + bias
    if hidden is not None:
        s = where(hidden, -math.inf, s)
    return s


def shift(m: Array) -> Array:
    """What exp's argument is shifted by: m, or 0 where m is -inf (a fully masked row)."""
    return where(m == -math.inf, 0.0, m)


def sdpa(i: dict[str, Array | None], attn_scale: float, band: Band, run: Varlen) -> tuple[Array, Array]:
    q, k, v = (run.unpack(i, p) for p in ("q", "k", "v"))
    q, k, v = run.zero_outside(q, "seq_len_q"), run.zero_outside(k, "seq_len_kv"), run.zero_outside(v, "seq_len_kv")
    hq = q.shape[1]
    s = scores(q, per_query_head(k, hq), i.get("bias"), attn_scale, run.hidden(q.gpu, band, q.shape[2], k.shape[2]))
    m = s.reduce("MAX", (3,))
    p = (s - shift(m)).apply("EXP")
    total = p.reduce("SUM", (3,))
    out = bmm(p, per_query_head(v, hq)) / total
    stats = where(m == math.inf, math.inf, m + total.apply("LOG"))
    return run.pack("o", where(total == 0.0, 0.0, out)), stats


def fold_heads(grad: Array, hkv: int) -> Array:
    """[B, Hq, S, D] summed over the G query heads of each kv head -> [B, Hkv, S, D]."""
    b, hq, s, d = grad.shape
    return grad.reshape(b, hkv, hq // hkv, s, d).reduce("SUM", (2,), keepdims=False)


def sdpa_backward(i: dict[str, Array | None], attn_scale: float, band: Band, run: Varlen) -> tuple[Array, Array, Array]:
    q, k, v, o, do = (run.unpack(i, p) for p in ("q", "k", "v", "o", "d_o"))
    q, o, do = (run.zero_outside(x, "seq_len_q") for x in (q, o, do))
    k, v = (run.zero_outside(x, "seq_len_kv") for x in (k, v))
    hq, hkv = q.shape[1], k.shape[1]
    k_full, v_full = per_query_head(k, hq), per_query_head(v, hq)
    hidden = run.hidden(q.gpu, band, q.shape[2], k.shape[2])
    s = scores(q, k_full, i.get("bias"), attn_scale, hidden)
    p = (s - shift(i["stats"])).apply("EXP")
    if hidden is not None:  # whatever stats holds in a padding row
        p = where(hidden, 0.0, p)
    delta = (do * o).reduce("SUM", (3,))
    dv = bmm(p.transpose(0, 1, 3, 2), do)
    ds = (bmm(do, v_full, transpose_b=True) - delta) * p * attn_scale
    dq = bmm(ds, k_full)
    dk = bmm(ds.transpose(0, 1, 3, 2), q)
    return run.pack("dq", dq), run.pack("dk", fold_heads(dk, hkv)), run.pack("dv", fold_heads(dv, hkv))


class _VarlenGpuReference(GpuReferenceBuilder):
    def check(self, node: Node, graph: Graph, device: Device) -> None:
        """Floating point apart from the integer length and offset ports."""
        decline_non_float(node, graph, integer_ports=VARLEN_PORTS)


class GpuReferenceSdpa(_VarlenGpuReference):
    name: ClassVar[str] = "gpu_reference.sdpa"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("sdpa",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        op = node.op

        def run(i: dict[str, Array | None]) -> dict[str, Array]:
            o, stats = sdpa(i, op.attn_scale, Band.of(op), Varlen(node, graph, i))
            return {"o": o, "stats": stats}

        return run


class GpuReferenceSdpaBackward(_VarlenGpuReference):
    name: ClassVar[str] = "gpu_reference.sdpa_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("sdpa_backward",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        op = node.op

        def run(i: dict[str, Array | None]) -> dict[str, Array]:
            dq, dk, dv = sdpa_backward(i, op.attn_scale, Band.of(op), Varlen(node, graph, i))
            return {"dq": dq, "dk": dk, "dv": dv}

        return run
