"""hipDNN attention with padding masks and ragged (THD) tensors imports as sigdnn's variable-length sdpa, and runs.

hipDNN keeps a tensor's ragged offsets on the tensor (ragged_offset_tensor_uid)
and the lengths on the node (padding_mask, seq_len_q, seq_len_kv); the
imported graph must equal the one built with sigdnn's API and compute the
same thing on the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from hipdnn_writer import graph_buffer

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.importers import hipdnn

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
    o, stats = g.sdpa(
        q, k, v, 0.125, None, True, True, seq_len_q=lq, seq_len_kv=lkv, ragged_offsets=offsets, name="attn"
    )
    o.set_output(True).set_name("o")
    stats.set_output(True).set_name("stats")
    grads = g.sdpa_backward(
        q, k, v, o, d_o, stats, 0.125, None, True, seq_len_q=lq, seq_len_kv=lkv, ragged_offsets=offsets, name="bwd"
    )
    for t, n in zip(grads, ("dq", "dk", "dv")):
        t.set_output(True).set_name(n)
    return g


def nodes(g: sigdnn.Graph, changes: dict | None = None) -> list:
    uid = {t.name: t.uid for t in g.tensors.values()}
    forward = {
        0: ("long", 1), 1: ("long", 2), 2: ("long", 3), 3: ("long", uid["o"]), 6: ("long", 5), 7: ("long", 6),
        22: ("long", uid["stats"]), 28: ("bool", True), 30: ("bool", True), 31: ("bool", True), 34: ("f32", 0.125),
    }  # fmt: skip
    backward = {
        0: ("long", 1), 1: ("long", 2), 2: ("long", 3), 3: ("long", uid["o"]), 4: ("long", 4),
        5: ("long", uid["stats"]), 6: ("long", uid["dq"]), 7: ("long", uid["dk"]), 8: ("long", uid["dv"]),
        11: ("long", 5), 12: ("long", 6), 20: ("bool", True), 21: ("bool", True), 24: ("f32", 0.125),
    }  # fmt: skip
    forward.update(changes or {})
    return [("attn", None, "Sdpa", forward), ("bwd", None, "SdpaBackward", backward)]


def ragged_of(g: sigdnn.Graph) -> dict[int, tuple[int, int]]:
    uid = {t.name: t.uid for t in g.tensors.values()}
    placed = {"q": 7, "do": 7, "o": 7, "dq": 7, "k": 8, "v": 8, "dk": 8, "dv": 8}
    return {uid[name]: (offsets, 1) for name, offsets in placed.items()}


def test_a_ragged_hipdnn_graph_imports_as_sigdnns_and_runs() -> None:
    g = sigdnn_graph()
    imported = hipdnn.load(graph_buffer(g, nodes(g), ragged=ragged_of(g)))
    assert imported == g
    rng = np.random.default_rng(0)
    lq, lkv = np.array([3, 1]), np.array([4, 2])
    ins = {n: rng.standard_normal((B, H, S, D)).astype(np.float32) for n in ("q", "k", "v", "do")}
    ins.update(lq=lq.reshape(B, 1, 1, 1).astype(np.int32), lkv=lkv.reshape(B, 1, 1, 1).astype(np.int32))
    ins.update(q_off=np.array([0, 3, 4]).reshape(B + 1, 1, 1, 1) * H * D, kv_off=np.array([0, 4, 6]) * H * D)
    ex = sigdnn.Executor("reference")
    got, want = ex.execute(ex.prepare(imported), ins), ex.execute(ex.prepare(g), ins)
    for name in ("o", "dq", "dk", "dv"):
        np.testing.assert_array_equal(got[name], want[name])


def test_ragged_imports_refused_by_name() -> None:
    g = sigdnn_graph()
    ragged = ragged_of(g)
    with pytest.raises(GraphError, match=r"ragged_offset_multiplier 64 is not supported"):
        hipdnn.load(graph_buffer(g, nodes(g), ragged={**ragged, 1: (7, 64)}))
    dq = next(t.uid for t in g.tensors.values() if t.name == "dq")
    with pytest.raises(GraphError, match=r"node 'bwd' \(SdpaBackwardAttributes\): dq's ragged offsets differ from q's"):
        hipdnn.load(graph_buffer(g, nodes(g), ragged={**ragged, dq: (8, 1)}))
    with pytest.raises(GraphError, match=r"seq_len_q / seq_len_kv are given without padding_mask"):
        hipdnn.load(graph_buffer(g, nodes(g, {30: ("bool", False)}), ragged=ragged))


def test_a_ragged_tensor_no_node_places_is_refused() -> None:
    g = sigdnn.Graph("g", io_dtype="float32")
    x = g.tensor("x", (2, 3), uid=1)
    g.tensor("off", (3,), dtype="int64", uid=2)
    y = g.pointwise("relu_fwd", x, name="relu").set_output(True).set_name("y")
    node = ("relu", None, "Pointwise", {0: ("u8", 21), 1: ("long", 1), 3: ("long", y.uid)})
    with pytest.raises(
        GraphError, match=r"hipDNN tensor 'x' \(uid 1\) has ragged offsets, but no node reading it takes"
    ):
        hipdnn.load(graph_buffer(g, [node], ragged={1: (2, 1)}))
