"""cuDNN graph JSON attention with padding masks and ragged (THD) tensors imports as sigdnn's variable-length sdpa.

cuDNN-frontend serializes a tensor's ragged offsets as ``ragged_offset_uid``
on the tensor and the lengths as the SEQ_LEN_Q / SEQ_LEN_KV inputs with
``padding_mask``; the import must equal the graph built with sigdnn's API.
"""

from __future__ import annotations

import json

import pytest
from cudnn_json_writer import graph_json, node

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.importers import cudnn_json

B, H, S, D = 2, 2, 4, 8
BSHD = (S * H * D, D, H * D, 1)


def sigdnn_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("g", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    q, k, v, d_o = (g.tensor(n, (B, H, S, D), BSHD, uid=i + 1) for i, n in enumerate(("q", "k", "v", "do")))
    lq, lkv = g.tensor("lq", (B, 1, 1, 1), dtype="int32", uid=5), g.tensor("lkv", (B, 1, 1, 1), dtype="int32", uid=6)
    q_off, kv_off = (
        g.tensor("q_off", (B + 1, 1, 1, 1), dtype="int64", uid=7),
        g.tensor("kv_off", (B + 1,), dtype="int64", uid=8),
    )
    offsets = {"q": q_off, "k": kv_off, "v": kv_off, "o": q_off}
    lengths = {"seq_len_q": lq, "seq_len_kv": lkv}
    o, stats = g.sdpa(q, k, v, 0.125, None, True, True, **lengths, ragged_offsets=offsets, name="attn")
    o.set_output(True).set_name("o")
    stats.set_output(True).set_name("stats")
    grads = g.sdpa_backward(q, k, v, o, d_o, stats, 0.125, None, True, **lengths, ragged_offsets=offsets, name="bwd")
    for t, n in zip(grads, ("dq", "dk", "dv")):
        t.set_output(True).set_name(n)
    return g


def document(g: sigdnn.Graph, ragged: dict[str, int], padding: bool = True) -> bytes:
    uid = {t.name: t.uid for t in g.tensors.values()}
    common = {"padding_mask": padding, "right_bound": 0, "attn_scale_value": None, "max_total_seq_len_q": 8}
    nodes = [
        node("SDPA", "attn", {"Q": 1, "K": 2, "V": 3, "SEQ_LEN_Q": 5, "SEQ_LEN_KV": 6},
             {"O": uid["o"], "Stats": uid["stats"]}, generate_stats=True, **common),
        node("SDPA_BWD", "bwd", {"Q": 1, "K": 2, "V": 3, "O": uid["o"], "dO": 4, "Stats": uid["stats"],
                                 "SEQ_LEN_Q": 5, "SEQ_LEN_KV": 6},
             {"dQ": uid["dq"], "dK": uid["dk"], "dV": uid["dv"]}, **common),
    ]  # fmt: skip
    nodes[0]["attn_scale_value"] = nodes[1]["attn_scale_value"] = "3E000000"  # 0.125 as cuDNN writes a float
    doc = json.loads(graph_json(g, nodes))
    for t in doc["tensors"]:
        if t["name"] in ragged:
            t["ragged_offset_uid"] = ragged[t["name"]]
            t["ragged_offset_name"] = "offsets"
    return json.dumps(doc).encode()


RAGGED = {"q": 7, "do": 7, "o": 7, "dq": 7, "k": 8, "v": 8, "dk": 8, "dv": 8}


def test_a_ragged_cudnn_graph_imports_as_sigdnns() -> None:
    g = sigdnn_graph()
    assert cudnn_json.load(document(g, RAGGED)) == g


def test_ragged_imports_refused_by_name() -> None:
    g = sigdnn_graph()
    with pytest.raises(GraphError, match=r"node 'bwd' \(SDPA_BWD\): dQ's ragged offsets differ from q's"):
        cudnn_json.load(document(g, {**RAGGED, "dq": 8}))
    with pytest.raises(
        GraphError, match=r"node 'attn' \(SDPA\): SEQ_LEN_Q / SEQ_LEN_KV are given without padding_mask"
    ):
        cudnn_json.load(document(g, RAGGED, padding=False))


def test_a_ragged_tensor_no_node_places_is_refused() -> None:
    g = sigdnn.Graph("g", io_dtype="float32")
    x = g.tensor("x", (2, 3), uid=1)
    g.tensor("off", (3,), dtype="int64", uid=2)
    y = g.pointwise("relu_fwd", x, name="relu").set_output(True).set_name("y")
    doc = json.loads(graph_json(g, [node("POINTWISE", "relu", {"IN_0": 1}, {"OUT_0": y.uid}, mode="RELU_FWD")]))
    doc["tensors"][0]["ragged_offset_uid"] = 2
    with pytest.raises(GraphError, match=r"tensor 'x' \(uid 1\) has a ragged_offset_uid, but no node reading it takes"):
        cudnn_json.load(json.dumps(doc).encode())
