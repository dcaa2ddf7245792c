"""Ragged (token-packed, THD) attention cases for the cuTile attention's tests (the emulator's and the GPU's).

Sequences of different lengths (a full one, a single query, one with no
key) packed end to end in [tokens, H, E] buffers, one offset per sequence,
NaN past the last sequence (never to be read); torch's float64 attention
run per sequence, cut to its lengths, is the oracle.
"""

from __future__ import annotations

import ml_dtypes  # noqa: F401  (names bfloat16 for np.dtype)
import numpy as np
import torch

import sigdnn

B, HQ, HKV, SQ, SKV, D, DV = 3, 4, 2, 70, 90, 80, 48
LQ, LKV = np.array([70, 1, 33]), np.array([90, 65, 0])  # full, one query, no key at all
SCALE = 0.11
SEED = 7


def bshd(dims: tuple[int, ...]) -> tuple[int, ...]:
    _, h, s, e = dims
    return (s * h * e, e, h * e, 1)


def offsets(lengths: np.ndarray, heads: int, e: int, shift: int = 0) -> np.ndarray:
    """Each sequence's first element: end to end from element ``shift`` (not a multiple of a row: off every row)."""
    return (shift + np.concatenate([[0], np.cumsum(lengths * heads * e)])).astype(np.int32).reshape(-1, 1, 1, 1)


def ragged_graph(backward: bool, causal: bool, dtype: str, ragged: str = "qkvo", **band: object) -> sigdnn.Graph:
    """Int32 lengths, and offsets for the ``ragged`` ones of q, k, v, o (which also place d_o, dq, dk, dv); the
    others padded batches; the diagonal band given."""
    g = sigdnn.Graph("ragged", io_dtype=dtype, compute_dtype="float32")
    shapes = {"q": (B, HQ, SQ, D), "k": (B, HKV, SKV, D), "v": (B, HKV, SKV, DV), "o": (B, HQ, SQ, DV)}
    q, k, v = (g.tensor(p, shapes[p], strides=bshd(shapes[p])) for p in "qkv")
    lq, lkv = (g.tensor(n, (B, 1, 1, 1), dtype="int32") for n in ("seq_len_q", "seq_len_kv"))
    offs = {p: g.tensor(f"{p}_off", (B + 1, 1, 1, 1), dtype="int32") for p in ragged}
    varlen = {"seq_len_q": lq, "seq_len_kv": lkv, "ragged_offsets": offs, **band}
    if not backward:
        o, stats = g.sdpa(q, k, v, SCALE, None, causal, True, name="sdpa", **varlen)
        o.set_output(True).set_name("o")
        stats.set_output(True).set_name("stats").set_data_type("float32")
        return g
    o, do = (g.tensor(n, shapes["o"], strides=bshd(shapes["o"])) for n in ("o", "d_o"))
    stats = g.tensor("stats", (B, HQ, SQ, 1), dtype="float32")
    for t, n in zip(
        g.sdpa_backward(q, k, v, o, do, stats, SCALE, None, causal, name="bwd", **varlen), ("dq", "dk", "dv")
    ):
        t.set_output(True).set_name(n)
    return g


def pack(x: np.ndarray, lengths: np.ndarray, dtype: np.dtype, shift: int = 0) -> np.ndarray:
    """The logical [B, H, S, E] array whose BSHD storage holds each sequence of ``x`` one after another, from
    element ``shift``."""
    tokens = np.concatenate([x[b, :, : lengths[b]].transpose(1, 0, 2) for b in range(B)]).reshape(-1)
    flat = np.full(x.size, np.nan)  # before the first sequence and past the last: must never be read
    flat[shift : shift + tokens.size] = tokens
    strides = tuple(8 * s for s in bshd(x.shape))
    return np.lib.stride_tricks.as_strided(flat, x.shape, strides).astype(dtype)


def per_sequence(q, k, v, do, causal):  # type: ignore[no-untyped-def]
    """torch float64 o, stats, dq, dk, dv of each sequence cut to its lengths ([H, len, E] each)."""
    found = []
    for b in range(B):
        qt, kt, vt = (torch.tensor(x[b, :, :n], requires_grad=True) for x, n in ((q, LQ[b]), (k, LKV[b]), (v, LKV[b])))
        s = SCALE * qt @ kt.repeat_interleave(HQ // HKV, 0).transpose(-1, -2)
        if causal:
            s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
        o = torch.nan_to_num(torch.softmax(s, -1)) @ vt.repeat_interleave(HQ // HKV, 0)
        o.backward(torch.tensor(do[b, :, : LQ[b]]))
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in (qt, kt, vt)]
        found.append(
            [o.detach().numpy(), torch.logsumexp(s, -1, keepdim=True).detach().numpy(), *(g.numpy() for g in grads)]
        )
    return found


def padded(x: np.ndarray, lengths: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``x`` with NaN in every row past its sequence (rows that must never be read)."""
    rows = np.arange(x.shape[2])[None, None, :, None] >= lengths[:, None, None, None]
    return np.where(rows, np.nan, x).astype(dtype)


def arrays(causal: bool, dtype: str, ragged: str = "qkvo", shift: int = 0) -> tuple[dict[str, np.ndarray], list]:
    """Inputs of both graphs (o and stats from torch's float64 forward; the ``ragged`` tensors packed from element
    ``shift``, the others padded) and the per-sequence truth."""
    rng = np.random.default_rng(SEED)
    q, do = rng.standard_normal((B, HQ, SQ, D)), rng.standard_normal((B, HQ, SQ, DV))
    k, v = rng.standard_normal((B, HKV, SKV, D)), rng.standard_normal((B, HKV, SKV, DV))
    np_dtype = np.dtype(dtype)
    q, do, k, v = (x.astype(np_dtype).astype(np.float64) for x in (q, do, k, v))  # the values the kernels see
    truth = per_sequence(q, k, v, do, causal)
    o = np.zeros((B, HQ, SQ, DV))
    stats = np.zeros((B, HQ, SQ, 1), np.float32)
    for b in range(B):
        o[b, :, : LQ[b]] = truth[b][0]
        stats[b, :, : LQ[b]] = truth[b][1]
    lay = {p: (lambda x, n, t: pack(x, n, t, shift)) if p in ragged else padded for p in "qkvo"}
    data = {"q": lay["q"](q, LQ, np_dtype), "k": lay["k"](k, LKV, np_dtype), "v": lay["v"](v, LKV, np_dtype),
            "o": lay["o"](o, LQ, np_dtype), "d_o": lay["o"](do, LQ, np_dtype), "stats": stats,
            "seq_len_q": LQ.astype(np.int32).reshape(B, 1, 1, 1), "seq_len_kv": LKV.astype(np.int32).reshape(B, 1, 1, 1),
            "q_off": offsets(LQ, HQ, D, shift), "k_off": offsets(LKV, HKV, D, shift),
            "v_off": offsets(LKV, HKV, DV, shift), "o_off": offsets(LQ, HQ, DV, shift)}  # fmt: skip
    return data, truth


def graph_inputs(g: sigdnn.Graph, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {t.name: data[t.name] for t in g.inputs}


def sequences(x: np.ndarray, lengths: np.ndarray, shift: int = 0) -> list[np.ndarray]:
    """Each sequence of a ragged logical array packed from element ``shift``, [H, len, E]."""
    flat = np.empty(x.size, dtype=np.float64)
    np.lib.stride_tricks.as_strided(flat, x.shape, tuple(8 * s for s in bshd(x.shape)))[...] = x
    found, at = [], shift
    for n in lengths:
        tokens = flat[at : at + n * x.shape[1] * x.shape[3]].reshape(n, x.shape[1], x.shape[3])
        found.append(tokens.transpose(1, 0, 2))
        at += tokens.size
    return found
