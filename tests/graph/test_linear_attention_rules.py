"""The gated delta rule ops' graph rules, dtypes, declared cost and validation draws."""

from __future__ import annotations

import re

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import GraphError
from sigdnn.graph import Limits
from sigdnn.graph.ops import linear_attention as la

T, H, K, V, N = 10, 2, 4, 3, 2


def graph(kind="gdn", dims=None, state="float32", backward=False, d_final=None, out_state=True, l2norm=False):
    dims = {"q": (T, H, K), "k": (T, H, K), "v": (T, H, V), "beta": (T, H), "h0": (N, H, K, V),
            "g": (T, H, K) if kind == "kda" else (T, H), "d_o": (T, H, V), "cu": (N + 1,), **(dims or {})}  # fmt: skip
    g = sigdnn.Graph("la", io_dtype="float32")
    t = {n: g.tensor(n, d, dtype="int32" if n == "cu" else None) for n, d in dims.items() if n not in ("h0", "d_o")}
    h0 = g.tensor("h0", dims["h0"], dtype=state) if state else None
    ins = (t["q"], t["k"], t["v"], t["g"], t["beta"], t["cu"], h0)
    if backward:
        d_o, dht = g.tensor("d_o", dims["d_o"]), g.tensor("dht", d_final) if d_final else None
        for out in getattr(g, f"{kind}_bwd")(*ins, d_o, dht, use_qk_l2norm=l2norm, name="n"):
            if out is not None:
                out.set_output(True)
    else:
        o, final = getattr(g, kind)(*ins, use_qk_l2norm=l2norm, output_final_state=out_state, name="n")
        o.set_output(True)
        if final is not None:
            final.set_output(True)
    return g


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(dims={"q": (T, H, K, 1)}), r"port 'q' \(tensor 'q'\) has rank 4; it is token-packed \[T, H, D\]"),
        (dict(dims={"k": (T, H, K + 1)}), r"port 'k' .* expected \[10, 2, 4\] \(q's \[T, H, K\]\)"),
        (dict(dims={"v": (T + 1, H, V)}), r"port 'v' \(tensor 'v'\) has dims \[11, 2, 3\]; it is \[T, H, V\]"),
        (dict(dims={"beta": (T, H, 1)}), r"port 'beta' .* \(one delta-rule rate per token and head\)"),
        (dict(dims={"d_o": (T, H, V + 1)}, backward=True), r"port 'd_o' .* expected \[10, 2, 3\] \(the forward's o\)"),
        (
            dict(backward=True, d_final=(N, H, K, V + 1)),
            r"port 'd_final_state' .*\(one \[K, V\] state per sequence and head\)",
        ),
    ],
)
def test_shape_rules_name_the_port(kwargs, message) -> None:
    with pytest.raises(GraphError, match=message):
        sigdnn.Executor("reference").prepare(graph(**kwargs))


def test_outputs_and_their_dtypes() -> None:
    g = graph(state="bfloat16")
    assert [(t.dims, str(g.dtype_of(t))) for t in g.outputs] == [((T, H, V), "float32"), ((N, H, K, V), "bfloat16")]
    g = graph(state=None)
    assert str(g.dtype_of(g.outputs[1])) == "float32"  # a final state without an initial one: float32
    assert len(graph(out_state=False).outputs) == 1
    g = graph("kda", backward=True, state="bfloat16")
    assert [(t.dims, str(g.dtype_of(t))) for t in g.outputs][3:] == [
        ((T, H, K), "float32"), ((T, H), "float32"), ((N, H, K, V), "bfloat16")
    ]  # fmt: skip
    assert len(graph(backward=True, state=None).outputs) == 5  # no d_initial_state without an initial state


def declared(g: sigdnn.Graph, what: str) -> int:
    """The work prepare reports for the node when the work limit is 1."""
    with pytest.raises(GraphError) as refused:
        sigdnn.Executor(limits=Limits(max_work=1)).prepare(g)
    return int(re.search(r"reaches (\d+) element operations", str(refused.value)).group(1))


@pytest.mark.parametrize("backward", [False, True])
def test_the_declared_work_follows_tokens_heads_and_the_state(backward: bool) -> None:
    """Per token and head a [K, V] state's worth of operations (x8 forward, x40 backward) and a fixed
    per-token cost, the reference's Python step."""
    work = declared(graph(backward=backward), "work")
    assert work == T * (H * K * V * (40 if backward else 8) + 4096)
    assert declared(graph(backward=backward, dims={"q": (2 * T, H, K), "k": (2 * T, H, K), "v": (2 * T, H, V),
                                                     "beta": (2 * T, H), "g": (2 * T, H), "d_o": (2 * T, H, V)}),
                    "work") == 2 * work  # fmt: skip


@pytest.mark.parametrize("backward", [False, True])
def test_the_declared_scratch_counts_the_reference_states(backward: bool) -> None:
    """Forward: a few [N, H, K, V] states; backward: a sequence's checkpoints, as long as all T tokens, too."""
    g = graph(backward=backward)
    op = g.nodes[0].op
    inputs = {p: g.tensors[u] for p, u in op.inputs().items()}
    state = 8 * H * K * V
    want = 6 * N * state if not backward else (la.checkpoints(T) + 6 + N) * state
    assert op.scratch_bytes(inputs, Limits()) == want
    assert la.checkpoints(1) == 3 and la.checkpoints(10) == 3 + 4 + 1 and la.checkpoints(4096) == 129


@pytest.mark.parametrize("l2norm", [False, True])
@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_validation_draws_valid_boundaries_decays_and_rates(kind: str, l2norm: bool) -> None:
    g = graph(kind, l2norm=l2norm, dims={"cu": (6,)}, state=None)
    for seed in range(5):
        ins = random_inputs(g, seed=seed)
        cu = ins["cu"]
        assert cu.dtype == np.int32 and cu[0] == 0 and cu[-1] == T and np.all(np.diff(cu) >= 0)
        assert np.all((ins["g"] <= 0) & (ins["g"] >= -0.5)) and ins["g"].dtype == np.float32
        assert np.all((ins["beta"] >= 0) & (ins["beta"] < 1))
        norms = np.linalg.norm(ins["q"], axis=-1), np.linalg.norm(ins["k"], axis=-1)
        for n in norms:
            assert np.allclose(n, 1, atol=1e-6) != l2norm  # unit rows unless the op normalizes itself
    cuts = np.concatenate([random_inputs(g, seed=s)["cu"][1:-1] for s in range(40)])
    assert cuts.min() == 0 and cuts.max() == T  # cut points anywhere in [0, T]: empty sequences too


def test_sequence_boundaries_and_dtype_rules() -> None:
    with pytest.raises(GraphError, match=r"'cu'\) has dims \[1\]; it is \[N \+ 1\]"):
        sigdnn.Executor("reference").prepare(graph(dims={"cu": (1,)}, state=None))
    g = graph(state=None)
    g.tensors[g.nodes[0].op.cu_seqlens].set_data_type("float32")
    with pytest.raises(GraphError, match=r"'cu'\) must be int32 or int64 \(sequence boundaries\)"):
        sigdnn.Executor("reference").prepare(g)
    g = graph(state=None)
    g.tensors[g.nodes[0].op.beta].set_data_type("int32")
    with pytest.raises(GraphError, match=r"port 'beta' \(tensor 'beta'\) must be floating point"):
        sigdnn.Executor("reference").prepare(g)
    cu = la.boundaries("w", "cu", np.array([0, 0, 4, 10]), 10)
    assert cu.dtype == np.int64 and cu.tolist() == [0, 0, 4, 10]
