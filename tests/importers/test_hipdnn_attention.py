"""hipDNN Sdpa / SdpaBackward options: each one sigdnn maps imports as the API's graph, each it lacks is refused
by name (the node, its table and what is missing), forward and backward. Field slots from the published
schema (hipdnn_writer): forward q 0, k 1, v 2, o 3, attn_mask 4, scale 5, stats 22, generate_stats 28,
causal_mask 31, causal_mask_bottom_right 32, attn_scale_value 34, left_bound 35, right_bound 36,
diagonal_alignment 38, mma_core_mode 39; backward q 0 .. dv 8, scale 9, attn_mask 10, causal_mask 21,
causal_mask_bottom_right 22, attn_scale_value 24, left_bound 25, right_bound 26, diagonal_alignment 27."""

from __future__ import annotations

import pytest
from hipdnn_writer import graph_buffer

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.importers import hipdnn

SQ, SKV = 4, 6
FWD = {"causal": 31, "bottom_right": 32, "value": 34, "left": 35, "right": 36, "align": 38, "scale": 5}
BWD = {"causal": 21, "bottom_right": 22, "value": 24, "left": 25, "right": 26, "align": 27, "scale": 9}


def attention_graph(scale=1.0, causal=False, stats=True, bias=False, skv=SKV, **band) -> sigdnn.Graph:
    g = sigdnn.Graph("g", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    q = g.tensor("q", (1, 2, SQ, 8), uid=1)
    k, v = g.tensor("k", (1, 2, skv, 8), uid=2), g.tensor("v", (1, 2, skv, 8), uid=3)
    b = g.tensor("bias", (1, 1, SQ, skv), uid=4) if bias else None
    if not isinstance(scale, float):
        scale = g.scalar("scale", scale[0], "float32", uid=9)
    o, st = g.sdpa(q, k, v, scale, b, causal, stats, name="attn", **band)
    o.set_output(True).set_name("o")
    if st is not None:
        st.set_output(True).set_name("stats")
        d_o = g.tensor("do", (1, 2, SQ, 8), uid=20)
        grads = g.sdpa_backward(q, k, v, o, d_o, st, scale, b, causal, name="bwd", **band)
        for t, n in zip(grads, ("dq", "dk", "dv")):
            t.set_output(True).set_name(n)
    return g


def nodes(g: sigdnn.Graph, fwd: dict, bwd: dict | None = None, bias: bool = False) -> list:
    uid = {t.name: t.uid for t in g.tensors.values()}
    forward = {0: ("long", 1), 1: ("long", 2), 2: ("long", 3), 3: ("long", uid["o"])}
    if bias:
        forward[4] = ("long", 4)
    if "stats" not in uid:
        return [("attn", None, "Sdpa", {**forward, **fwd})]
    forward[22] = ("long", uid["stats"])
    backward = {i: ("long", uid[n]) for i, n in enumerate(("q", "k", "v", "o", "do", "stats", "dq", "dk", "dv"))}
    if bias:
        backward[10] = ("long", 4)
    return [("attn", None, "Sdpa", {**forward, **fwd}), ("bwd", None, "SdpaBackward", {**backward, **(bwd or {})})]


def fields(slots: dict, **values) -> dict:
    kinds = {"causal": "bool", "bottom_right": "bool", "value": "f32", "left": "long", "right": "long", "align": "u8"}
    return {slots[name]: (kinds.get(name, "long"), value) for name, value in values.items()}


def imports_as(g: sigdnn.Graph, fwd: dict, bwd: dict | None = None, bias: bool = False) -> None:
    assert hipdnn.load(graph_buffer(g, nodes(g, fwd, bwd, bias))) == g


def test_without_a_scale_it_is_one_and_without_a_mask_none_is_applied() -> None:
    imports_as(attention_graph(1.0), {})


@pytest.mark.parametrize(
    "options",
    [
        dict(causal=True),
        dict(right=0),  # the causal band, top-left
        dict(right=0, align=0),
        dict(bottom_right=True),
        dict(right=0, align=1),
        dict(bottom_right=True, right=0),
    ],
    ids=str,
)
def test_every_spelling_of_the_causal_mask(options: dict) -> None:
    bottom_right = bool(options.get("bottom_right")) or options.get("align") == 1
    g = attention_graph(0.5, causal=True, diagonal_bottom_right=bottom_right)
    imports_as(g, fields(FWD, value=0.5, **options), fields(BWD, value=0.5, **options))


@pytest.mark.parametrize(
    ("options", "band"),
    [
        (dict(causal=True, left=2), dict(causal=True, left_bound=2)),  # a sliding window
        (dict(right=3), dict(right_bound=3)),
        (dict(left=4, right=-1, align=1), dict(left_bound=4, right_bound=-1, diagonal_bottom_right=True)),
    ],
    ids=["sliding_window", "right_bound", "bottom_right_band"],
)
def test_a_diagonal_band_imports_as_sdpas_band(options: dict, band: dict) -> None:
    g = attention_graph(0.5, **band)
    imports_as(g, fields(FWD, value=0.5, **options), fields(BWD, value=0.5, **options))


def test_a_tensor_scale_bias_and_stats() -> None:
    g = attention_graph((0.25,), bias=True)
    imports_as(g, {**fields(FWD, scale=9), 28: ("bool", True)}, fields(BWD, scale=9), bias=True)
    g = attention_graph(1.0, stats=False)
    imports_as(g, {28: ("bool", False)})


REFUSED = [
    (dict(align=2), "unknown diagonal_alignment 2"),
    (dict(causal=True, align=1), "causal_mask is top-left aligned, but the band is set bottom-right"),
    (dict(causal=True, bottom_right=True), "causal_mask is top-left aligned, but the band is set bottom-right"),
    (dict(bottom_right=True, right=2), "a causal mask and right_bound 2 both given"),
    (dict(scale=9, value=0.25), "give the attention scale as a tensor or a value, not both"),
]


@pytest.mark.parametrize(("options", "message"), REFUSED, ids=[m for _, m in REFUSED])
def test_options_sigdnn_lacks_are_refused_forward_and_backward(options: dict, message: str) -> None:
    g = attention_graph((0.25,))
    with pytest.raises(GraphError, match=rf"node 'attn' \(SdpaAttributes\): {message}"):
        hipdnn.load(graph_buffer(g, nodes(g, fields(FWD, **options), fields(BWD, scale=9))))
    with pytest.raises(GraphError, match=rf"node 'bwd' \(SdpaBackwardAttributes\): {message}"):
        hipdnn.load(graph_buffer(g, nodes(g, fields(FWD, scale=9), fields(BWD, **options))))


@pytest.mark.parametrize(
    ("stats", "extra", "message"),
    [
        (True, {28: ("bool", False)}, "generate_stats disagrees with the presence of the stats tensor"),
        (False, {28: ("bool", True)}, "generate_stats disagrees with the presence of the stats tensor"),
        (True, {39: ("u8", 1)}, r"mma_core_mode \(fp8 attention\) is not supported"),
    ],
)
def test_forward_options_sigdnn_lacks_are_refused(stats: bool, extra: dict, message: str) -> None:
    g = attention_graph(1.0, stats=stats)
    with pytest.raises(GraphError, match=rf"node 'attn' \(SdpaAttributes\): {message}"):
        hipdnn.load(graph_buffer(g, nodes(g, extra)))


@pytest.mark.parametrize(("grad", "forward_port", "other"), [("dk", "k", 7), ("dv", "v", 7), ("do", "o", 8)])
def test_each_gradient_must_share_its_forward_tensors_offsets(grad: str, forward_port: str, other: int) -> None:
    from test_hipdnn_ragged import nodes as ragged_nodes
    from test_hipdnn_ragged import ragged_of, sigdnn_graph

    g = sigdnn_graph()
    uid = next(t.uid for t in g.tensors.values() if t.name == grad)
    with pytest.raises(
        GraphError,
        match=rf"node 'bwd' \(SdpaBackwardAttributes\): {grad}'s ragged offsets differ from {forward_port}'s",
    ):
        hipdnn.load(graph_buffer(g, ragged_nodes(g), ragged={**ragged_of(g), uid: (other, 1)}))
