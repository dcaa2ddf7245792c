"""Ragged (token-packed, THD) attention cases for the cuTile attention's tests (the emulator's and the GPU's).

Sequences of different lengths (a full one, a single query, one with no
key) packed end to end in [tokens, H, E] buffers, one offset per sequence,
NaN past the last sequence (never to be read); torch's float64 attention
run per sequence, cut to its lengths, is the oracle. ``layout`` gives the
strides: ``bshd`` (each token's heads one after another, a head's elements
side by side: what the kernels read in place) or ``bseh`` (a token's
elements head-minor: each head's elements H apart, what they unpack).
"""

from __future__ import annotations

from collections.abc import Callable

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


def bseh(dims: tuple[int, ...]) -> tuple[int, ...]:
    """Token-packed too, but a token's elements stored [E, H]: a head's elements lie H apart."""
    _, h, s, e = dims
    return (s * h * e, 1, h * e, h)


Layout = Callable[[tuple[int, ...]], tuple[int, ...]]


def offsets(lengths: np.ndarray, heads: int, e: int) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths * heads * e)]).astype(np.int32).reshape(-1, 1, 1, 1)


def ragged_graph(backward: bool, causal: bool, dtype: str, ragged: str = "qkvo", layout: Layout = bshd) -> sigdnn.Graph:
    """Int32 lengths, and offsets for the ``ragged`` ones of q, k, v, o (which also place d_o, dq, dk, dv); the
    others padded batches. Every tensor of 4-D dims has ``layout``'s strides."""
    g = sigdnn.Graph("ragged", io_dtype=dtype, compute_dtype="float32")
    shapes = {"q": (B, HQ, SQ, D), "k": (B, HKV, SKV, D), "v": (B, HKV, SKV, DV), "o": (B, HQ, SQ, DV)}
    q, k, v = (g.tensor(p, shapes[p], strides=layout(shapes[p])) for p in "qkv")
    lq, lkv = (g.tensor(n, (B, 1, 1, 1), dtype="int32") for n in ("seq_len_q", "seq_len_kv"))
    offs = {p: g.tensor(f"{p}_off", (B + 1, 1, 1, 1), dtype="int32") for p in ragged}
    varlen = {"seq_len_q": lq, "seq_len_kv": lkv, "ragged_offsets": offs}
    if not backward:
        o, stats = g.sdpa(q, k, v, SCALE, None, causal, True, name="sdpa", **varlen)
        o.set_output(True).set_name("o")
        stats.set_output(True).set_name("stats").set_data_type("float32")
        return g
    o, do = (g.tensor(n, shapes["o"], strides=layout(shapes["o"])) for n in ("o", "d_o"))
    stats = g.tensor("stats", (B, HQ, SQ, 1), dtype="float32")
    for t, n in zip(
        g.sdpa_backward(q, k, v, o, do, stats, SCALE, None, causal, name="bwd", **varlen), ("dq", "dk", "dv")
    ):
        t.set_output(True).set_name(n)
    return g


def pack(x: np.ndarray, lengths: np.ndarray, dtype: np.dtype, layout: Layout = bshd) -> np.ndarray:
    """The logical [B, H, S, E] array whose ``layout`` storage holds each sequence of ``x`` one after another."""
    flat = np.full(x.size, np.nan)  # past the last sequence: must never be read
    at = 0
    for b, n in enumerate(lengths):
        _strided(flat[at:], (1, *x.shape[1:]), layout(x.shape))[:, :, :n] = x[b : b + 1, :, :n]
        at += n * x.shape[1] * x.shape[3]
    return _strided(flat, x.shape, layout(x.shape)).astype(dtype)


def _strided(flat: np.ndarray, dims: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(flat, dims, tuple(flat.itemsize * s for s in strides), writeable=True)


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


def arrays(causal: bool, dtype: str, ragged: str = "qkvo", layout: Layout = bshd) -> tuple[dict[str, np.ndarray], list]:
    """Inputs of both graphs (o and stats from torch's float64 forward; the ``ragged`` tensors packed in ``layout``,
    the others padded) and the per-sequence truth."""
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
    lay = {p: (lambda x, n, t: pack(x, n, t, layout)) if p in ragged else padded for p in "qkvo"}
    data = {"q": lay["q"](q, LQ, np_dtype), "k": lay["k"](k, LKV, np_dtype), "v": lay["v"](v, LKV, np_dtype),
            "o": lay["o"](o, LQ, np_dtype), "d_o": lay["o"](do, LQ, np_dtype), "stats": stats,
            "seq_len_q": LQ.astype(np.int32).reshape(B, 1, 1, 1), "seq_len_kv": LKV.astype(np.int32).reshape(B, 1, 1, 1),
            "q_off": offsets(LQ, HQ, D), "k_off": offsets(LKV, HKV, D), "v_off": offsets(LKV, HKV, DV),
            "o_off": offsets(LQ, HQ, DV)}  # fmt: skip
    return data, truth


def graph_inputs(g: sigdnn.Graph, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {t.name: data[t.name] for t in g.inputs}


def sequences(x: np.ndarray, lengths: np.ndarray, layout: Layout = bshd) -> list[np.ndarray]:
    """Each sequence of a ragged logical array, [H, len, E]."""
    flat = np.empty(x.size, dtype=np.float64)
    _strided(flat, x.shape, layout(x.shape))[...] = x
    found, at = [], 0
    for n in lengths:
        found.append(_strided(flat[at:], (1, *x.shape[1:]), layout(x.shape))[0, :, :n].copy())
        at += n * x.shape[1] * x.shape[3]
    return found


# -- sequences of 0 ... 65 tokens around the 64-row tile, with gaps (the in-place path's cases) ------------
LQ_AROUND, LKV_AROUND = np.array([1, 63, 64, 65, 0, 2]), np.array([65, 0, 64, 1, 63, 64])
S_AROUND = 65
FILL = 1234.5  # what an output buffer holds before a run, and outside the sequences after it
SHAPES = {"q": (6, 4, S_AROUND, 40), "k": (6, 2, S_AROUND, 40), "v": (6, 2, S_AROUND, 24), "o": (6, 4, S_AROUND, 24)}
LENGTHS = {"q": LQ_AROUND, "k": LKV_AROUND, "v": LKV_AROUND, "o": LQ_AROUND}
PLACER = {"q": "q", "k": "k", "v": "v", "o": "o", "d_o": "o", "dq": "q", "dk": "k", "dv": "v"}
GAPS = {"packed": 0, "whole_row_gaps": 120, "gaps_inside_rows": 3}  # 120: a multiple of both head dims, 40 and 24


def around_graph(backward: bool, causal: bool) -> sigdnn.Graph:
    """Six sequences of 0 ... 65 tokens (q and kv apart), GQA (4 query heads over 2), head dims 40 and 24."""
    g = sigdnn.Graph("around", io_dtype="float32", compute_dtype="float32")
    q, k, v = (g.tensor(p, SHAPES[p], strides=bshd(SHAPES[p])) for p in "qkv")
    lengths = {n: g.tensor(n, (6,), dtype="int32") for n in ("seq_len_q", "seq_len_kv")}
    varlen = {**lengths, "ragged_offsets": {p: g.tensor(f"{p}_off", (7,), dtype="int32") for p in "qkvo"}}
    if not backward:
        o, stats = g.sdpa(q, k, v, 0.15, None, causal, True, name="sdpa", **varlen)
        o.set_output(True).set_name("o")
        stats.set_output(True).set_name("stats").set_data_type("float32")
        return g
    o, do = (g.tensor(n, SHAPES["o"], strides=bshd(SHAPES["o"])) for n in ("o", "d_o"))
    stats = g.tensor("stats", (6, 4, S_AROUND, 1), dtype="float32")
    for t, n in zip(
        g.sdpa_backward(q, k, v, o, do, stats, 0.15, None, causal, name="bwd", **varlen), ("dq", "dk", "dv")
    ):
        t.set_output(True).set_name(n)
    return g


def offsets_with_gaps(port: str, gap: int) -> np.ndarray:
    """Sequences one after another from element 0, ``gap`` elements between two (the buffer's end left free)."""
    _, heads, _, width = SHAPES[port]
    return np.concatenate([[0], np.cumsum(LENGTHS[port] * heads * width + gap)]).astype(np.int32)


def positions(t: sigdnn.Tensor, offsets: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Storage positions in ``t``'s buffer of every in-sequence element (int64: a hostile offset does not wrap)."""
    _, sh, ss, _ = t.strides
    _, heads, _, width = t.dims
    inner = [np.add.outer(np.add.outer(np.arange(heads) * sh, np.arange(n) * ss), np.arange(width)).ravel()
             for n in lengths]  # fmt: skip
    return np.concatenate([np.int64(off) + at for off, at in zip(offsets, inner)])


def logical(flat: np.ndarray, t: sigdnn.Tensor) -> np.ndarray:
    """The [B, H, S, E] view of a buffer by ``t``'s strides."""
    return np.lib.stride_tricks.as_strided(flat, t.dims, tuple(flat.itemsize * s for s in t.strides))


def storage(values: np.ndarray, t: sigdnn.Tensor) -> np.ndarray:
    """The buffer whose [B, H, S, E] view by ``t``'s strides holds ``values``."""
    flat = np.empty(t.size, values.dtype)
    logical(flat, t)[...] = values
    return flat


def around_inputs(
    g: sigdnn.Graph, offsets: dict[str, np.ndarray], executor: sigdnn.Executor, seed: int = 3
) -> dict[str, np.ndarray]:
    """Random sequences at ``offsets`` (q, k, v, o), NaN everywhere else in their buffers (never to be read); for
    the backward, o and stats from ``executor``'s forward over the sequences (the reference refuses hostile
    offsets)."""
    rng = np.random.default_rng(seed)
    data = {"seq_len_q": LQ_AROUND.astype(np.int32), "seq_len_kv": LKV_AROUND.astype(np.int32)}
    data |= {f"{p}_off": offsets[p] for p in "qkvo"}
    names = {t.name for t in g.inputs}
    for port in ("q", "k", "v", "d_o"):
        if port in names:
            t = g.tensor_by_name(port)
            values = rng.standard_normal(t.dims).astype(np.float32)  # of (b, h, s, e) wherever the offsets put it
            flat = np.full(t.size, np.nan, np.float32)
            for b, (off, n) in enumerate(zip(offsets[PLACER[port]][:-1], LENGTHS[PLACER[port]])):
                at = positions(t, [off], [n])
                inside = (at >= 0) & (at < t.size)
                flat[at[inside]] = values[b, :, :n].ravel()[inside]
            data[port] = logical(flat, t)
    if "stats" in names:
        forward = around_graph(False, g.nodes[-1].op.use_causal_mask)
        data |= executor.run(forward, {t.name: data[t.name] for t in forward.inputs})
    return {t.name: data[t.name] for t in g.inputs}


def hostile_offsets() -> dict[str, np.ndarray]:
    """Offsets far past the buffers' end and before their start (sequences 1 and 2), one whose sequence runs past
    the end (3), one past the end and inside a row (5); sequences 0 and 4 at good offsets."""
    offsets = {}
    for p in "qkvo":
        size = int(np.prod(SHAPES[p]))
        offsets[p] = offsets_with_gaps(p, 0)
        offsets[p][[1, 2, 3, 5]] = [2**31 - 1, -(2**31), size - 2 * SHAPES[p][1] * SHAPES[p][3], size + 3]
    return offsets


def misplaced(g: sigdnn.Graph, inputs: dict[str, np.ndarray], flats: dict[str, np.ndarray]) -> list[str]:
    """What is wrong with the outputs' buffers after a run (``flats``: each output's storage, filled with FILL
    before): an element inside a sequence (and the buffer) not written, or one outside every sequence written."""
    found = []
    for name, flat in flats.items():
        t = g.tensor_by_name(name)
        at = positions(t, inputs[f"{PLACER[name]}_off"][:-1], LENGTHS[PLACER[name]])
        written = np.zeros(t.size, bool)
        written[at[(at >= 0) & (at < t.size)]] = True
        if (flat[written] == FILL).any():
            found.append(f"{name}: {int((flat[written] == FILL).sum())} elements inside the sequences not written")
        if (flat[~written] != FILL).any():
            found.append(f"{name}: {int((flat[~written] != FILL).sum())} elements outside the sequences written")
    return found
