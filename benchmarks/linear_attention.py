"""Variable-length attention on one GPU: sigdnn's gdn / kda against flash-linear-attention, ragged sdpa against torch.

Measures issue #35's claims, same run, same buffers:

- ``gdn`` / ``kda``: sigdnn's forward and backward (``Executor("gpu")``, the cuTile chunked kernels, TF32 or
  ``--compute bfloat16``'s bf16 products) against fla 0.6's ``chunk_gated_delta_rule`` / ``chunk_kda`` and their
  autograd graph replayed, at T = 4096-32768 tokens in 1-64 sequences of mixed lengths, heads 16 / 32, K = V = 128,
  bf16 q / k / v, float32 gates and states, l2-normalized q / k; sigdnn's outputs checked against fla's.
- ``sdpa``: ragged (THD) sdpa forward and backward, 64 sequences of 128-8192 tokens, d 128, bf16: sigdnn (ragged
  and padded graphs) against torch's varlen attention where torch has it, and torch SDPA over the padded batch.

CUDA events, median of interleaved samples (``cuda_timing``); ratios are the other side's time over sigdnn's. Needs
torch with CUDA, cuda-tile and flash-linear-attention 0.6; results in benchmarks/results/linear_attention.md.

    PYTHONPATH=. python benchmarks/linear_attention.py --parts gdn kda sdpa --json $OUT/linear_attention.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
from collections.abc import Callable
from typing import Any

import numpy as np

TOKENS = (4096, 16384, 32768)
SEQUENCES = (1, 8, 64)
HEADS = (16, 32)
DIM = 128


def lengths_of(tokens: int, sequences: int, seed: int = 0) -> list[int]:
    """``sequences`` mixed lengths summing to ``tokens`` (random cut points, fixed seed; none empty)."""
    rng = np.random.default_rng(seed + tokens + sequences)
    cuts = np.sort(rng.choice(np.arange(1, tokens), size=sequences - 1, replace=False)) if sequences > 1 else []
    return np.diff(np.concatenate([[0], cuts, [tokens]])).astype(int).tolist()


def delta_rule_case(kind: str, tokens: int, sequences: int, heads: int, iters: int, repeats: int, compute: str) -> dict:
    import torch
    from cuda_timing import interleaved_samples, median_ms

    import sigdnn

    fla_ops = __import__("fla.ops." + ("gated_delta_rule" if kind == "gdn" else "kda"), fromlist=["x"])
    fla_chunk = fla_ops.chunk_gated_delta_rule if kind == "gdn" else fla_ops.chunk_kda
    cu = torch.tensor([0, *np.cumsum(lengths_of(tokens, sequences))], dtype=torch.int32, device="cuda")
    gen = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape: int, dtype: Any = torch.bfloat16) -> Any:
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(dtype)

    q, k, v = randn(tokens, heads, DIM), randn(tokens, heads, DIM), randn(tokens, heads, DIM)
    g_dims = (tokens, heads, DIM) if kind == "kda" else (tokens, heads)
    g = -torch.rand(*g_dims, generator=gen, device="cuda") * 0.5
    beta = torch.rand(tokens, heads, generator=gen, device="cuda").to(torch.bfloat16)
    h0 = randn(sequences, heads, DIM, DIM, dtype=torch.float32) * 0.1

    pack = {"q": q, "k": k, "v": v, "g": g, "beta": beta, "cu": cu, "h0": h0}
    ex = sigdnn.Executor("gpu")
    plan = ex.prepare(delta_rule_graph(kind, pack, False, compute))
    ours = ex.execute(plan, pack, out="torch")  # host tensors: compared once, off the clock

    def fla_run(q: Any, k: Any, v: Any, g: Any, beta: Any, h0: Any) -> Any:
        return fla_chunk(q[None], k[None], v[None], g[None], beta[None], initial_state=h0, output_final_state=True,
                         cu_seqlens=cu.long(), use_qk_l2norm_in_kernel=True)  # fmt: skip

    inputs = (q, k, v, g, beta, h0)
    theirs, their_final = fla_run(*inputs)
    row: dict[str, Any] = {
        "kind": kind, "tokens": tokens, "sequences": sequences, "heads": heads, "compute": compute,
        "max_abs_diff_o": float((ours["o"].float() - theirs[0].float().cpu()).abs().max()),
        "max_abs_diff_final": float((ours["final"].float() - their_final.float().cpu()).abs().max()),
    }  # fmt: skip
    samples = interleaved_samples({"sigdnn": lambda: ex.execute(plan, pack, to_host=False),
                                   "fla": lambda: fla_run(*inputs)}, iters, repeats)  # fmt: skip
    row.update({f"{name}_ms": statistics.median(s) for name, s in samples.items()})
    row["ratio_forward"] = row["fla_ms"] / row["sigdnn_ms"]
    try:  # fla refuses its gated backward on Hopper under Triton 3.4-3.7.0 (wrong results, fla #640)
        row["fla_backward_ms"] = autograd_backward_ms(fla_run, inputs, iters, repeats)
    except RuntimeError as error:
        row["fla_backward"] = str(error)[:120]
    grads = {**pack, "d_o": torch.randn_like(v), "d_final": torch.randn_like(h0)}
    backward = ex.prepare(delta_rule_graph(kind, grads, True, compute))
    row["sigdnn_backward_ms"] = median_ms(lambda: ex.execute(backward, grads, to_host=False), iters, repeats)
    row["ratio_backward"] = row.get("fla_backward_ms", float("nan")) / row["sigdnn_backward_ms"]
    return row


def delta_rule_graph(kind: str, pack: dict[str, Any], backward: bool, compute: str = "float16") -> Any:
    """gdn / kda (o, final state) or their backward (every gradient) over ``pack``'s tensors, by name."""
    import sigdnn

    graph = sigdnn.Graph(kind, io_dtype="bfloat16", compute_dtype=compute)  # products: TF32 at float16, else bf16
    t = {n: graph.tensor(n, tuple(pack[n].shape)) for n in ("q", "k", "v", "beta", "d_o") if n in pack}
    t.update({n: graph.tensor(n, tuple(pack[n].shape), dtype="float32") for n in ("g", "h0", "d_final") if n in pack})
    t["cu"] = graph.tensor("cu", tuple(pack["cu"].shape), dtype="int32")
    first = [t[n] for n in ("q", "k", "v", "g", "beta", "cu", "h0")]
    outs = (getattr(graph, f"{kind}_bwd")(*first, t["d_o"], t["d_final"], use_qk_l2norm=True, name="n") if backward
            else getattr(graph, kind)(*first, use_qk_l2norm=True, output_final_state=True, name="n"))  # fmt: skip
    for name, out in zip(("dq", "dk", "dv", "dg", "dbeta", "dh0") if backward else ("o", "final"), outs):
        out.set_output(True).set_name(name)  # every gradient exists: the node has an initial state
    return graph


def autograd_backward_ms(run: Callable[..., Any], tensors: tuple[Any, ...], iters: int, repeats: int) -> float:
    """A torch function's backward alone (fla's, torch SDPA's): one forward on leaves that need gradients, then
    its graph replayed backward."""
    import torch
    from cuda_timing import median_ms

    outs = run(*(x.detach().requires_grad_(True) for x in tensors))
    outs = outs if isinstance(outs, tuple) else (outs,)
    grads = [torch.randn_like(o) for o in outs]
    return median_ms(lambda: torch.autograd.backward(outs, grads, retain_graph=True), iters, repeats)


def sdpa_case(sequences: int, heads: int, iters: int, repeats: int) -> dict[str, Any]:
    import torch
    import torch.nn.functional as F
    from cuda_timing import interleaved_samples, median_ms

    import sigdnn

    rng = np.random.default_rng(1)
    lengths = rng.integers(128, 8193, size=sequences).tolist()
    total, longest = sum(lengths), max(lengths)
    q, k, v = (torch.randn(total, heads, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    cu = torch.tensor([0, *np.cumsum(lengths)], device="cuda", dtype=torch.int32)
    padded = [torch.zeros(sequences, heads, longest, DIM, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    for b, (start, n) in enumerate(zip(cu[:-1].tolist(), lengths)):
        for p, x in zip(padded, (q, k, v)):
            p[b, :, :n] = x[start : start + n].transpose(0, 1)
    lens = torch.tensor(lengths, device="cuda", dtype=torch.int32)
    mask = (torch.arange(longest, device="cuda")[None, :] < lens[:, None])[:, None, None, :]
    impls: dict[str, Callable[[], Any]] = {"torch_padded": lambda: F.scaled_dot_product_attention(*padded, attn_mask=mask)}  # fmt: skip
    varlen = getattr(getattr(torch.nn.attention, "varlen", None), "varlen_attn", None)
    if varlen is not None:
        impls["torch_varlen"] = lambda: varlen(q, k, v, cu, cu, longest, longest)
    row: dict[str, Any] = {"sequences": sequences, "heads": heads, "tokens": total}
    dims, strides = (sequences, heads, longest, DIM), (longest * heads * DIM, DIM, heads * DIM, 1)
    try:  # the ragged graph on the packed tokens; the same attention on the padded batch with its lengths
        ex = sigdnn.Executor("gpu")  # GPU_LIMITS: the reference's float64 copies are not charged
        flat = [torch.cat([x.reshape(-1), x.new_zeros(int(np.prod(dims)) - x.numel())]) for x in (q, k, v)]
        pack = {**dict(zip("qkv", (f.as_strided(dims, strides) for f in flat))), "lens": lens, "offs": cu * heads * DIM}
        padded_pack = {**dict(zip("qkv", padded)), "lens": lens}
        for name, graph_pack, layout in (("sigdnn", pack, strides), ("sigdnn_padded", padded_pack, None)):
            plans = [ex.prepare(attention_graph(dims, layout, graph_pack is pack, b)) for b in (False, True)]
            impls[name] = lambda p=plans[0], k=graph_pack: ex.execute(p, k, to_host=False)
            # the backward's o, d_o: q's and k's buffers; stats a constant (the kernels' time does not depend on values)
            grads = {**graph_pack, "o": graph_pack["q"], "d_o": graph_pack["k"], "stats": lens.new_full((*dims[:3], 1), 8.0, dtype=torch.float32)}  # fmt: skip
            row[f"{name}_backward_ms"] = median_ms(lambda p=plans[1], k=grads: ex.execute(p, k, to_host=False), iters, repeats)  # fmt: skip
    except sigdnn.SigdnnError as e:
        row["sigdnn"] = f"not run: {e}"
    samples = interleaved_samples(impls, iters, repeats)
    row.update({f"{name}_ms": statistics.median(s) for name, s in samples.items()})
    run = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # noqa: E731
    row["torch_padded_backward_ms"] = autograd_backward_ms(run, tuple(padded), iters, repeats)
    for suffix in ("", "_backward"):
        others = [o for o in ("torch_varlen", "torch_padded", "sigdnn_padded") if f"{o}{suffix}_ms" in row]
        row.update({f"ratio_{o}{suffix}": row[f"{o}{suffix}_ms"] / row[f"sigdnn{suffix}_ms"] for o in others if f"sigdnn{suffix}_ms" in row})  # fmt: skip
    return row


def attention_graph(dims: tuple[int, ...], strides: tuple[int, ...] | None, ragged: bool, backward: bool) -> Any:
    """sdpa (o) or sdpa_backward (dq, dk, dv) over sequences of ``lens`` tokens: ragged (every [B, H, S, D]
    tensor placed by ``offs``) or a padded batch."""
    import sigdnn

    graph = sigdnn.Graph("ragged" if ragged else "padded", io_dtype="bfloat16", compute_dtype="float32")
    t = {n: graph.tensor(n, dims, strides) for n in ("q", "k", "v", *(("o", "d_o") if backward else ()))}
    lens = graph.tensor("lens", (dims[0],), dtype="int32")
    offsets = dict.fromkeys("qkvo", graph.tensor("offs", (dims[0] + 1,), dtype="int32")) if ragged else None
    common = {"seq_len_q": lens, "seq_len_kv": lens, "ragged_offsets": offsets, "name": "n", "attn_scale": DIM**-0.5}
    if backward:
        stats = graph.tensor("stats", (*dims[:3], 1), dtype="float32")
        outs = zip(graph.sdpa_backward(*t.values(), stats, **common), ("dq", "dk", "dv"))
    else:
        outs = [(graph.sdpa(*t.values(), **common)[0], "o")]
    for out, name in outs:
        out.set_output(True).set_name(name)
    return graph


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parts", nargs="+", choices=("gdn", "kda", "sdpa"), default=["gdn", "kda", "sdpa"])
    parser.add_argument("--tokens", nargs="+", type=int, default=list(TOKENS), help="total tokens per case")
    parser.add_argument("--sequences", nargs="+", type=int, default=list(SEQUENCES), help="sequences per case")
    parser.add_argument("--heads", nargs="+", type=int, default=list(HEADS))
    parser.add_argument("--iters", type=int, default=5, help="back-to-back calls per timing sample")
    parser.add_argument("--repeats", type=int, default=10, help="timing samples per implementation")
    parser.add_argument("--compute", default="float16", choices=("float16", "bfloat16"), help="TF32 / bf16 products")
    parser.add_argument("--json", help="write every row to this file")
    args = parser.parse_args()
    rows = []
    for part in args.parts:
        grid = [[64], args.heads] if part == "sdpa" else [args.tokens, args.sequences, args.heads]
        for case in itertools.product(*grid):
            rows.append(sdpa_case(*case, args.iters, args.repeats) if part == "sdpa" else
                        delta_rule_case(part, *case, args.iters, args.repeats, args.compute))  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
