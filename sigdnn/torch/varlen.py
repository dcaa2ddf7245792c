"""Variable-length attention's torch ops: ``torch.ops.sigdnn.sdpa_varlen`` and its backward, on cached graphs.

flash-attention's varlen convention: q [Tq, Hq, D], k [Tk, Hkv, D],
v [Tk, Hkv, Dv], each the sequences of a batch packed token after token,
``cu_seqlens_q`` / ``cu_seqlens_kv`` [B + 1] (int32 or int64) their
running token counts, ``max_seqlen_q`` / ``max_seqlen_kv`` bounds on a
sequence's length. The graph is sigdnn's ragged sdpa (docs/ops.md,
"Variable-length attention"): lengths from the cu_seqlens differences,
ragged offsets of cu_seqlens * H * E elements. Its tensors are declared
[B, H, max_seqlen, E], so each packed input is first copied to the front
of a buffer of that size (the graph's span; the copy and the room past the
last token are what the executor accepting packed buffers of the true size
would save); outputs come back as views of their first T tokens. The
causal mask is top-left per sequence (key j for query i when j <= i), as
torch's ``is_causal``, unless ``bottom_right`` aligns it (and the band's
``left_bound`` / ``right_bound``, graph/ops/sdpa.py's ``Band``) to each
sequence's last key, flash-attention's rule. Where every sequence's query
and key lengths are equal the two alignments are one, and the node is
built top-left. On CUDA the cuTile attention builders run it, every band
included (the CuTe flash-attention kernels do not take variable lengths
yet); what they decline (head dims past 256) runs on the reference.
"""

from __future__ import annotations

from typing import Any

import torch

from sigdnn.errors import UsageError
from sigdnn.graph.ops import ragged
from sigdnn.torch import graphs
from sigdnn.torch.cache import run
from sigdnn.torch.ops import _LIBRARY, BAND_ARGUMENTS, _stats_dtype, define, register_autograd

Tensor = torch.Tensor
ATTRIBUTES = f"int max_seqlen_q, int max_seqlen_kv, float scale, bool causal, {BAND_ARGUMENTS}"


def band(cu_q: Tensor, cu_kv: Tensor, bottom_right: bool, left: int | None, right: int | None) -> tuple:
    """The node's band attributes (diagonal_bottom_right, left_bound, right_bound): bottom-right only where some
    sequence's query and key lengths differ (where none does, both alignments are the same diagonal)."""
    level = cu_q is cu_kv or (cu_q.shape == cu_kv.shape and bool(torch.equal(cu_q, cu_kv.to(cu_q.dtype))))
    return bool(bottom_right) and not level, left, right


def padded(t: Tensor, batch: int, max_len: int, name: str) -> Tensor:
    """Token-packed t [T, H, E] at the front of a [B, H, max_len, E] token-major buffer (ragged.token_major)."""
    tokens, heads, width = t.shape
    if tokens > batch * max_len:
        raise UsageError(f"sdpa_varlen: {name} holds {tokens} tokens, more than {batch} sequences of {max_len}")
    room = t.new_empty(batch * max_len * heads * width)
    room[: t.numel()].copy_(t.reshape(-1))
    dims = (batch, heads, max_len, width)
    return room.as_strided(dims, ragged.token_major(dims))


def packed(t: Tensor, tokens: int) -> Tensor:
    """The first ``tokens`` tokens of a token-major [B, H, S, E] output, as [tokens, H, E]."""
    batch, heads, length, width = t.shape
    return t.transpose(1, 2).reshape(batch * length, heads, width)[:tokens]


def varlen_tensors(q: Tensor, k: Tensor, v: Tensor, cu_q: Tensor, cu_kv: Tensor, max_q: int,
                   max_kv: int) -> tuple[Tensor, ...]:  # fmt: skip
    """The graph's inputs (graphs.VARLEN_PORTS) from the packed tensors and their cu_seqlens."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 3:
            raise UsageError(f"sdpa_varlen: {name} must be token-packed [T, H, E], got {t.dim()}-d {list(t.shape)}")
    for name, cu in (("cu_seqlens_q", cu_q), ("cu_seqlens_kv", cu_kv)):
        if cu.dim() != 1 or cu.dtype not in (torch.int32, torch.int64):
            raise UsageError(f"sdpa_varlen: {name} must be a 1-d int32 / int64 tensor, got {cu.dtype} {list(cu.shape)}")
    batch = cu_q.numel() - 1
    if batch < 1 or cu_kv.numel() != batch + 1:
        raise UsageError(f"sdpa_varlen: cu_seqlens_q has {cu_q.numel()} entries, cu_seqlens_kv {cu_kv.numel()}; "
                         "both need B + 1 >= 2")  # fmt: skip
    if min(max_q, max_kv) < 1:
        raise UsageError(f"sdpa_varlen: max_seqlen_q {max_q} and max_seqlen_kv {max_kv} must be >= 1")
    for name, cu, t in (("q", cu_q, q), ("k", cu_kv, k), ("v", cu_kv, v)):
        if int(cu[0]) != 0:
            raise UsageError(f"sdpa_varlen: the cu_seqlens for {name} start at {int(cu[0])}, not 0")
        if int(cu[-1]) != t.shape[0]:
            raise UsageError(f"sdpa_varlen: the last cu_seqlens entry for {name} is {int(cu[-1])}, "
                             f"but {name} holds {t.shape[0]} tokens")  # fmt: skip
    lengths = [(cu[1:] - cu[:-1]).to(torch.int32) for cu in (cu_q, cu_kv)]
    offsets = [cu.to(torch.int64) * (t.shape[1] * t.shape[2]) for cu, t in ((cu_q, q), (cu_kv, k), (cu_kv, v))]
    offsets.append(cu_q.to(torch.int64) * (q.shape[1] * v.shape[2]))  # o: Hq heads of Dv
    views = [padded(t, batch, n, name) for t, n, name in ((q, max_q, "q"), (k, max_kv, "k"), (v, max_kv, "v"))]
    return (*views, *lengths, *offsets)


@define(
    f"sdpa_varlen(Tensor q, Tensor k, Tensor v, Tensor cu_seqlens_q, Tensor cu_seqlens_kv, {ATTRIBUTES}) -> (Tensor, Tensor)"
)
def sdpa_varlen(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_kv: Tensor, max_seqlen_q: int,
                max_seqlen_kv: int, scale: float, causal: bool, bottom_right: bool = False,
                left_bound: int | None = None, right_bound: int | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """(o [Tq, Hq, Dv], stats [B, Hq, max_seqlen_q, 1]: each row's logsumexp, undefined past its sequence)."""
    tensors = varlen_tensors(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    attributes = (float(scale), bool(causal), *band(cu_seqlens_q, cu_seqlens_kv, bottom_right, left_bound, right_bound))
    o, stats = run("sdpa_varlen", graphs.sdpa_varlen, tensors, attributes, fallback=True)
    return packed(o, q.shape[0]).clone(), stats


@torch.library.register_fake("sigdnn::sdpa_varlen", lib=_LIBRARY)
def _(q: Tensor, k: Tensor, v: Tensor, cu_seqlens_q: Tensor, cu_seqlens_kv: Tensor, max_seqlen_q: int,
      max_seqlen_kv: int, scale: float, causal: bool, bottom_right: bool = False, left_bound: int | None = None,
      right_bound: int | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    stats = (cu_seqlens_q.shape[0] - 1, q.shape[1], max_seqlen_q, 1)
    return q.new_empty((q.shape[0], q.shape[1], v.shape[2])), q.new_empty(stats, dtype=_stats_dtype(q))


@define(
    "sdpa_varlen_backward(Tensor q, Tensor k, Tensor v, Tensor o, Tensor d_o, Tensor stats, Tensor cu_seqlens_q,"
    f" Tensor cu_seqlens_kv, {ATTRIBUTES}) -> (Tensor, Tensor, Tensor)"
)
def sdpa_varlen_backward(q: Tensor, k: Tensor, v: Tensor, o: Tensor, d_o: Tensor, stats: Tensor,
                         cu_seqlens_q: Tensor, cu_seqlens_kv: Tensor, max_seqlen_q: int, max_seqlen_kv: int,
                         scale: float, causal: bool, bottom_right: bool = False, left_bound: int | None = None,
                         right_bound: int | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    """(dq, dk, dv), token-packed as q, k, v."""
    tensors = varlen_tensors(q, k, v, cu_seqlens_q, cu_seqlens_kv, max_seqlen_q, max_seqlen_kv)
    batch = cu_seqlens_q.numel() - 1
    rows = (padded(o, batch, max_seqlen_q, "o"), padded(d_o, batch, max_seqlen_q, "d_o"), stats)
    attributes = (float(scale), bool(causal), *band(cu_seqlens_q, cu_seqlens_kv, bottom_right, left_bound, right_bound))
    dq, dk, dv = run("sdpa_varlen_backward", graphs.sdpa_varlen_backward, (*tensors, *rows), attributes, fallback=True)
    return packed(dq, q.shape[0]).clone(), packed(dk, k.shape[0]).clone(), packed(dv, v.shape[0]).clone()


@torch.library.register_fake("sigdnn::sdpa_varlen_backward", lib=_LIBRARY)
def _(q: Tensor, k: Tensor, v: Tensor, o: Tensor, d_o: Tensor, stats: Tensor, cu_seqlens_q: Tensor,
      cu_seqlens_kv: Tensor, max_seqlen_q: int, max_seqlen_kv: int, scale: float, causal: bool,
      bottom_right: bool = False, left_bound: int | None = None,
      right_bound: int | None = None) -> tuple[Tensor, Tensor, Tensor]:  # fmt: skip
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _context(ctx: Any, inputs: tuple, output: tuple) -> None:
    q, k, v, cu_q, cu_kv, *attributes = inputs
    ctx.save_for_backward(q, k, v, *output, cu_q, cu_kv)
    ctx.attributes = tuple(attributes)


def _grad(ctx: Any, d_o: Tensor, d_stats: Tensor) -> tuple:
    q, k, v, o, stats, cu_q, cu_kv = ctx.saved_tensors
    dq, dk, dv = sdpa_varlen_backward(q, k, v, o, d_o.contiguous(), stats, cu_q, cu_kv, *ctx.attributes)
    return dq, dk, dv, None, None, *(None for _ in ctx.attributes)


register_autograd("sdpa_varlen", _grad, _context)
