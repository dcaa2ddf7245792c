"""Graphs of the gated delta rule (forward and backward) shared by the emulated and the GPU tests."""

from __future__ import annotations

import numpy as np

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.campaign.recipes import GraphRecipe

CHUNK_EDGES = (1, 63, 64, 65)  # lengths around the chunk of 64
# 150 sequences of 1-130 tokens (seeded): more than two of the ranking's 64-sequence blocks and tiles
MANY_LENGTHS = tuple(int(n) for n in np.random.default_rng(150).integers(1, 131, 150))


def delta_rule_graph(
    kind: str,
    lengths: tuple[int, ...],
    heads: int = 2,
    kd: int = 8,
    vd: int = 8,
    io: str = "bfloat16",
    l2norm: bool = True,
    state: str | None = "float32",
    scale: float | None = None,
    final: bool = True,
) -> tuple[sigdnn.Graph, dict[str, np.ndarray]]:
    """A gdn / kda node over sequences of ``lengths`` (cu_seqlens given as an input), and validation's inputs;
    ``final``: the node has its final state output."""
    tokens = sum(lengths)
    g = sigdnn.Graph(f"{kind}_{len(lengths)}", io_dtype=io, compute_dtype="float32")
    q, k, v = g.tensor("q", (tokens, heads, kd)), g.tensor("k", (tokens, heads, kd)), g.tensor("v", (tokens, heads, vd))
    gate = g.tensor("g", (tokens, heads, kd) if kind == "kda" else (tokens, heads), dtype="float32")
    beta, cu = g.tensor("beta", (tokens, heads)), g.tensor("cu", (len(lengths) + 1,), dtype="int32")
    h0 = g.tensor("h0", (len(lengths), heads, kd, vd), dtype=state) if state else None
    o, final_state = getattr(g, kind)(
        q, k, v, gate, beta, cu, h0, scale=scale, use_qk_l2norm=l2norm, output_final_state=final, name="n"
    )
    o.set_output(True).set_name("o")
    if final:
        final_state.set_output(True).set_name("final").set_data_type(state or "float32")
    inputs = random_inputs(g, seed=len(lengths) + sum(lengths))
    inputs["cu"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return g, inputs


def delta_rule_backward_graph(
    kind: str,
    lengths: tuple[int, ...],
    heads: int = 2,
    kd: int = 8,
    vd: int = 8,
    io: str = "bfloat16",
    l2norm: bool = True,
    state: str | None = "float32",
    d_final: bool = True,
) -> tuple[sigdnn.Graph, dict[str, np.ndarray]]:
    """A gdn_bwd / kda_bwd node over sequences of ``lengths``, and validation's inputs."""
    tokens, n = sum(lengths), len(lengths)
    g = sigdnn.Graph(f"{kind}_bwd_{n}", io_dtype=io, compute_dtype="float32")
    q, k, v = g.tensor("q", (tokens, heads, kd)), g.tensor("k", (tokens, heads, kd)), g.tensor("v", (tokens, heads, vd))
    gate = g.tensor("g", (tokens, heads, kd) if kind == "kda" else (tokens, heads), dtype="float32")
    beta, cu = g.tensor("beta", (tokens, heads)), g.tensor("cu", (n + 1,), dtype="int32")
    h0 = g.tensor("h0", (n, heads, kd, vd), dtype=state) if state else None
    d_o = g.tensor("d_o", (tokens, heads, vd))
    dht = g.tensor("dht", (n, heads, kd, vd), dtype=state or "float32") if d_final else None
    grads = getattr(g, f"{kind}_bwd")(q, k, v, gate, beta, cu, h0, d_o, dht, use_qk_l2norm=l2norm, name="n")
    for t, name in zip(grads, ("dq", "dk", "dv", "dg", "dbeta", "dh0")):
        if t is not None:
            t.set_output(True).set_name(name)
    inputs = random_inputs(g, seed=len(lengths) + sum(lengths))
    inputs["cu"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return g, inputs


def campaign_recipe(
    kind: str, lengths: tuple[int, ...], dtype: str = "bfloat16", compute: str | None = None
) -> GraphRecipe:
    return GraphRecipe(kind, None, dtype, (2, 8, 8, *lengths), "packed", (("use_qk_l2norm", True),), compute)
