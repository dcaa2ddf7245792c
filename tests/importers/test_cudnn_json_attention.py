"""cuDNN graph JSON SDPA / SDPA_BWD attributes: each one sigdnn maps imports as the API's graph, each it lacks is
refused by name (the node and what is missing), forward and backward."""

from __future__ import annotations

import pytest
from cudnn_json_writer import graph_json, hex_float, node

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.importers import cudnn_json

SQ, SKV = 4, 6


def attention_graph(scale=1.0, causal=False, stats=True, bias=False, skv=SKV, backward=False, **band) -> sigdnn.Graph:
    """q (uid 1), k (2), v (3), bias (4), dO (20); ``band``: Graph.sdpa's band keywords."""
    g = sigdnn.Graph("g", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    q = g.tensor("q", (1, 2, SQ, 8), uid=1)
    k, v = g.tensor("k", (1, 2, skv, 8), uid=2), g.tensor("v", (1, 2, skv, 8), uid=3)
    b = g.tensor("bias", (1, 1, SQ, skv), uid=4) if bias else None
    o, st = g.sdpa(q, k, v, scale, b, causal, stats, name="attn", **band)
    o.set_output(True).set_name("o")
    if st is not None:
        st.set_output(True).set_name("stats")
    if backward:
        d_o = g.tensor("do", (1, 2, SQ, 8), uid=20)
        for t, n in zip(g.sdpa_backward(q, k, v, o, d_o, st, scale, b, causal, name="bwd", **band), ("dq", "dk", "dv")):
            t.set_output(True).set_name(n)
    return g


def forward(g: sigdnn.Graph, bias: bool = False, **attrs) -> dict:
    uid = {t.name: t.uid for t in g.tensors.values()}
    outputs = {"O": uid["o"], **({"Stats": uid["stats"]} if "stats" in uid else {})}
    inputs = {"Q": 1, "K": 2, "V": 3, **({"Bias": 4} if bias else {})}
    return node("SDPA", "attn", inputs, outputs, **attrs)


def backward(g: sigdnn.Graph, **attrs) -> dict:
    uid = {t.name: t.uid for t in g.tensors.values()}
    ins = {"Q": 1, "K": 2, "V": 3, "O": uid["o"], "dO": 20, "Stats": uid["stats"]}
    return node("SDPA_BWD", "bwd", ins, {"dQ": uid["dq"], "dK": uid["dk"], "dV": uid["dv"]}, **attrs)


def imports_as(g: sigdnn.Graph, nodes: list[dict]) -> None:
    assert cudnn_json.load(graph_json(g, nodes)) == g


def test_without_a_scale_it_is_one_and_without_a_right_bound_there_is_no_mask() -> None:
    g = attention_graph(1.0, causal=False)
    imports_as(g, [forward(g)])
    imports_as(g, [forward(g, dropout_probability=hex_float(0.0), alibi_mask=False, stats_use_log2=False)])


@pytest.mark.parametrize("alignment", ["TOP_LEFT", "BOTTOM_RIGHT"])
def test_a_value_scale_and_the_causal_band(alignment: str) -> None:
    """right_bound 0 is the causal mask, aligned as the JSON says."""
    g = attention_graph(0.5, causal=True, backward=True, diagonal_bottom_right=alignment == "BOTTOM_RIGHT")
    attrs = dict(attn_scale_value=hex_float(0.5), right_bound=0, diagonal_alignment=alignment)
    hints = dict(max_total_seq_len_q=None, max_total_seq_len_kv=None)
    imports_as(g, [forward(g, generate_stats=True, **attrs, **hints), backward(g, **attrs, **hints)])


def test_stats_follow_the_stats_output_and_bias_its_input() -> None:
    g = attention_graph(1.0, stats=False, bias=True)
    imports_as(g, [forward(g, bias=True)])
    imports_as(g, [forward(g, bias=True, generate_stats=False)])
    g = attention_graph(1.0, stats=True)
    imports_as(g, [forward(g)])  # no generate_stats: the Stats output says it


def test_a_tensor_scale_is_read() -> None:
    g = sigdnn.Graph("g", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    q, k, v = (g.tensor(n, (1, 2, SQ, 8), uid=i + 1) for i, n in enumerate("qkv"))
    scale = g.scalar("scale", 0.25, "float32", uid=9)
    o, _ = g.sdpa(q, k, v, scale, name="attn")
    o.set_output(True).set_name("o")
    uid = {t.name: t.uid for t in g.tensors.values()}
    imports_as(g, [node("SDPA", "attn", {"Q": 1, "K": 2, "V": 3, "Attn_scale": 9}, {"O": uid["o"]})])


@pytest.mark.parametrize(
    ("attrs", "band"),
    [
        (dict(left_bound=3, right_bound=0), dict(causal=True, left_bound=3)),
        (dict(right_bound=2), dict(right_bound=2)),
        (
            dict(left_bound=2, right_bound=-1, diagonal_alignment="BOTTOM_RIGHT"),
            dict(left_bound=2, right_bound=-1, diagonal_bottom_right=True),
        ),
    ],
    ids=["sliding_window", "right_bound", "bottom_right_band"],
)
def test_a_diagonal_band_imports_as_sdpas_band(attrs: dict, band: dict) -> None:
    g = attention_graph(1.0, backward=True, **band)
    imports_as(g, [forward(g, **attrs), backward(g, **attrs)])


REFUSED = [
    (dict(alibi_mask=True), "alibi_mask is not supported"),
    (dict(dropout_probability=hex_float(0.125)), "dropout is not supported"),
    (dict(diagonal_alignment="MIDDLE"), "unknown diagonal_alignment 'MIDDLE'"),
    (dict(max_seq_len_kv=64), r"max_seq_len_kv \(paged attention\) is not supported"),
]


@pytest.mark.parametrize(("attrs", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_attention_options_sigdnn_lacks_are_refused_forward_and_backward(attrs: dict, message: str) -> None:
    g = attention_graph(1.0, backward=True)
    with pytest.raises(GraphError, match=rf"node 'attn' \(SDPA\): {message}"):
        cudnn_json.load(graph_json(g, [forward(g, **attrs), backward(g)]))
    with pytest.raises(GraphError, match=rf"node 'bwd' \(SDPA_BWD\): {message}"):
        cudnn_json.load(graph_json(g, [forward(g), backward(g, **attrs)]))


@pytest.mark.parametrize(
    ("stats", "attrs", "message"),
    [
        (False, dict(generate_stats=True), "generate_stats disagrees with the presence of the Stats output"),
        (True, dict(generate_stats=False), "generate_stats disagrees with the presence of the Stats output"),
        (True, dict(stats_use_log2=True), r"stats_use_log2 is not supported"),
        (True, dict(mma_core_mode="FP8_E4M3"), r"mma_core_mode \(fp8 attention\) is not supported"),
    ],
)
def test_forward_options_sigdnn_lacks_are_refused(stats: bool, attrs: dict, message: str) -> None:
    g = attention_graph(1.0, stats=stats)
    with pytest.raises(GraphError, match=rf"node 'attn' \(SDPA\): {message}"):
        cudnn_json.load(graph_json(g, [forward(g, **attrs)]))


def test_a_scale_given_twice_is_refused() -> None:
    g = sigdnn.Graph("g", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    q, k, v = (g.tensor(n, (1, 2, SQ, 8), uid=i + 1) for i, n in enumerate("qkv"))
    o, _ = g.sdpa(q, k, v, g.scalar("scale", 0.25, "float32", uid=9), name="attn")
    o.set_output(True).set_name("o")
    attn = node("SDPA", "attn", {"Q": 1, "K": 2, "V": 3, "Attn_scale": 9}, {"O": o.uid}, attn_scale_value="3E800000")
    with pytest.raises(GraphError, match=r"node 'attn' \(SDPA\): give the attention scale as a tensor or a value"):
        cudnn_json.load(graph_json(g, [attn]))


def test_a_bias_reaches_the_backward_too() -> None:
    g = attention_graph(1.0, bias=True, backward=True)
    fwd, bwd = forward(g, bias=True), backward(g)
    bwd["inputs"]["Bias"] = 4
    imports_as(g, [fwd, bwd])


@pytest.mark.parametrize(
    ("grad", "port", "forward_port", "other"), [("dk", "dK", "k", 7), ("dv", "dV", "v", 7), ("do", "dO", "o", 8)]
)
def test_each_gradient_must_share_its_forward_tensors_offsets(
    grad: str, port: str, forward_port: str, other: int
) -> None:
    from test_cudnn_json_ragged import RAGGED, document, sigdnn_graph

    g = sigdnn_graph()
    with pytest.raises(
        GraphError, match=rf"node 'bwd' \(SDPA_BWD\): {port}'s ragged offsets differ from {forward_port}'s"
    ):
        cudnn_json.load(document(g, {**RAGGED, grad: other}))
