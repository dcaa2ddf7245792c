"""sdpa cases for the cuTile attention's tests (the emulator's and the GPU's): what the CuTe flash attention
declines (float32, head dims 32 / 80 / 96 / 256, q / k and v apart, grouped and multi-query heads, the top-left
causal mask with Sq != Skv, BSHD strides, the stats output, diagonal bands: sliding windows, bottom-right
alignment, bounds that leave rows no key), the graph of each, and torch's float64 oracle."""

from __future__ import annotations

import attrs
import numpy as np
import torch

import sigdnn


@attrs.frozen
class Case:
    name: str
    batch: int
    heads: int
    kv_heads: int
    sq: int
    skv: int
    d: int
    dv: int
    dtype: str
    causal: bool
    stats: bool
    bshd: bool = False
    left: int | None = None  # the band's bounds and alignment (docs/ops.md, sdpa)
    right: int | None = None
    bottom_right: bool = False

    @property
    def band(self) -> dict[str, object]:
        return {"left_bound": self.left, "right_bound": self.right, "diagonal_bottom_right": self.bottom_right}


CASES = [
    Case("f32_d80_gqa_stats", 2, 4, 2, 70, 90, 80, 80, "float32", False, True),
    Case("bf16_d96_dv64_causal_bshd", 1, 2, 2, 100, 100, 96, 64, "bfloat16", True, False, bshd=True),
    Case("f16_d256_causal_short_q", 1, 1, 1, 3, 130, 256, 256, "float16", True, True),
    Case("f32_d32_multi_query", 2, 3, 1, 65, 64, 32, 48, "float32", False, False),
    Case("bf16_d64_sliding_window", 2, 4, 2, 150, 150, 64, 64, "bfloat16", True, True, left=37),
    Case("f16_d128_decoding_window", 1, 2, 1, 5, 200, 128, 128, "float16", True, True, left=70, bottom_right=True),
    Case("f32_d32_band_below_diagonal", 1, 2, 2, 130, 90, 32, 32, "float32", False, True, left=20, right=-5),
    Case("bf16_d80_bottom_right_long_q", 1, 1, 1, 140, 70, 80, 80, "bfloat16", False, True, right=3, bottom_right=True),
]


def graph(case: Case) -> sigdnn.Graph:
    g = sigdnn.Graph(f"sdpa_{case.name}", io_dtype=case.dtype, compute_dtype="float32")

    def tensor(name: str, heads: int, s: int, d: int) -> sigdnn.Tensor:
        t = g.tensor(name, (case.batch, heads, s, d))
        if case.bshd:  # [B, S, H, D] in memory
            t.set_stride((s * heads * d, d, heads * d, 1))
        return t

    q = tensor("q", case.heads, case.sq, case.d)
    k = tensor("k", case.kv_heads, case.skv, case.d)
    v = tensor("v", case.kv_heads, case.skv, case.dv)
    o, stats = g.sdpa(q, k, v, attn_scale=case.d**-0.5, use_causal_mask=case.causal, generate_stats=case.stats,
                      name="sdpa", **case.band)  # fmt: skip
    o.set_output(True).set_name("o")
    if stats is not None:
        stats.set_output(True).set_name("stats")
    return g


def hidden(case: Case) -> torch.Tensor:
    """Bool [Sq, Skv], True where key j is hidden from query i: docs/ops.md's rule written out (a = Skv - Sq
    bottom-right, else 0; causal hides j > i + a, a right bound j > i + a + right, a left bound j <= i + a - left)."""
    i, j = torch.arange(case.sq)[:, None], torch.arange(case.skv)[None, :]
    a = case.skv - case.sq if case.bottom_right else 0
    out = torch.zeros(case.sq, case.skv, dtype=torch.bool)
    if case.causal:
        out |= j > i + a
    if case.right is not None:
        out |= j > i + a + case.right
    if case.left is not None:
        out |= j <= i + a - case.left
    return out


def softmax_rows(s: torch.Tensor, case: Case) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, logsumexp) of the masked scores; a row that sees no key has p = 0 and logsumexp -inf (docs/ops.md)."""
    mask = hidden(case)
    seen = ~mask.all(-1, keepdim=True)
    s = s.masked_fill(mask, -torch.inf).masked_fill(~seen, 0.0)
    lse = torch.logsumexp(s, -1, keepdim=True).masked_fill(~seen, -torch.inf)
    return torch.softmax(s, -1) * seen, lse


def torch_attention(case: Case, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """torch's float64 attention (the case's band, kv heads repeated) and each row's logsumexp."""
    q, k, v = (torch.from_numpy(inputs[p].astype(np.float64)) for p in "qkv")
    groups = case.heads // case.kv_heads
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    p, lse = softmax_rows(q @ k.transpose(-1, -2) * case.d**-0.5, case)
    return (p @ v).numpy(), lse.numpy()


def backward_graph(case: Case) -> sigdnn.Graph:
    """sdpa_backward of the case: q, k, v, o, d_o and stats [B, H, Sq, 1] float32 as inputs -> dq, dk, dv."""
    g = sigdnn.Graph(f"sdpa_bwd_{case.name}", io_dtype=case.dtype, compute_dtype="float32")

    def tensor(name: str, heads: int, s: int, d: int) -> sigdnn.Tensor:
        t = g.tensor(name, (case.batch, heads, s, d))
        if case.bshd:
            t.set_stride((s * heads * d, d, heads * d, 1))
        return t

    q, k = tensor("q", case.heads, case.sq, case.d), tensor("k", case.kv_heads, case.skv, case.d)
    v, o = tensor("v", case.kv_heads, case.skv, case.dv), tensor("o", case.heads, case.sq, case.dv)
    d_o = tensor("d_o", case.heads, case.sq, case.dv)
    stats = g.tensor("stats", (case.batch, case.heads, case.sq, 1))
    stats.set_data_type("float32")
    grads = g.sdpa_backward(q, k, v, o, d_o, stats, attn_scale=case.d**-0.5, use_causal_mask=case.causal,
                            name="sdpa_bwd", **case.band)  # fmt: skip
    for t, name in zip(grads, ("dq", "dk", "dv")):
        t.set_output(True).set_name(name)
    return g


def consistent_backward_inputs(case: Case, seed: int) -> dict[str, np.ndarray]:
    """q, k, v, d_o drawn; o and stats the float64 forward's (rounded to their dtypes), as a training step has."""
    g = backward_graph(case)
    rng = np.random.default_rng(seed)
    dtype = {t.name: g.dtype_of(t).numpy for t in g.inputs}
    inputs = {n: rng.standard_normal(g.tensor_by_name(n).dims).astype(dtype[n]) for n in ("q", "k", "v", "d_o")}
    o, lse = torch_attention(case, inputs)
    inputs["o"], inputs["stats"] = o.astype(dtype["o"]), lse.astype(np.float32)
    return inputs


def torch_attention_backward(case: Case, inputs: dict[str, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(dq, dk, dv) by torch's float64 autograd of the attention (kv heads repeated, their gradients summed)."""
    q, k, v = (torch.from_numpy(inputs[p].astype(np.float64)).requires_grad_(True) for p in "qkv")
    groups = case.heads // case.kv_heads
    p, _ = softmax_rows(q @ k.repeat_interleave(groups, 1).transpose(-1, -2) * case.d**-0.5, case)
    (p @ v.repeat_interleave(groups, 1)).backward(torch.from_numpy(inputs["d_o"].astype(np.float64)))
    return q.grad.numpy(), k.grad.numpy(), v.grad.numpy()
