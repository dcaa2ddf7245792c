"""cuDNN-frontend graph JSON, written from the frontend's published serialization (cudnn_json_writer), imports to
the graph sigdnn's API builds, node type by node type."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cudnn_json_writer import graph_json, hex_float, node

import sigdnn
from sigdnn.errors import GraphError, SchemaError
from sigdnn.importers import cudnn_json


def g_new() -> sigdnn.Graph:
    return sigdnn.Graph("g", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")


def out(t: sigdnn.graph.Tensor, name: str) -> sigdnn.graph.Tensor:
    return t.set_output(True).set_name(name)


def check(graph: sigdnn.Graph, nodes: list) -> sigdnn.Graph:
    got = cudnn_json.load(graph_json(graph, nodes))
    assert got == graph
    return got


def test_pointwise_with_float_attributes_as_hex() -> None:
    g = g_new()
    a, b = g.tensor("a", (2, 3), uid=1), g.tensor("b", (2, 3), uid=2)
    s = g.pointwise("sub", a, b, name="sub")
    y = out(g.pointwise("swish_fwd", s, name="swish", swish_beta=1.5), "y")
    check(
        g,
        [
            node(
                "POINTWISE",
                "sub",
                {"IN_0": 1, "IN_1": 2},
                {"OUT_0": s.uid},
                mode="SUB",
                axis=None,
                relu_lower_clip=None,
                relu_upper_clip=None,
                relu_lower_clip_slope=None,
                swish_beta=None,
                elu_alpha=None,
                softplus_beta=None,
            ),
            node("POINTWISE", "swish", {"IN_0": s.uid}, {"OUT_0": y.uid}, mode="SWISH_FWD", swish_beta=hex_float(1.5)),
        ],
    )


def test_convolutions() -> None:
    g = g_new()
    x, w, dy = (
        g.tensor("x", (1, 2, 7, 7), uid=1),
        g.tensor("w", (4, 2, 3, 3), uid=2),
        g.tensor("dy", (1, 4, 4, 4), uid=3),
    )
    y = out(g.conv_fprop(x, w, padding=(1, 1), stride=(2, 2), name="fprop"), "y")
    dx = out(g.conv_dgrad(dy, w, padding=(1, 1), stride=(2, 2), dims=(1, 2, 7, 7), name="dgrad"), "dx")
    dw = out(g.conv_wgrad(x, dy, padding=(1, 1), stride=(2, 2), dims=(4, 2, 3, 3), name="wgrad"), "dw")
    conv = {
        "pre_padding": [1, 1],
        "post_padding": [1, 1],
        "stride": [2, 2],
        "dilation": [1, 1],
        "math_mode": "CROSS_CORRELATION",
    }
    check(
        g,
        [
            node("CONV_FPROP", "fprop", {"X": 1, "W": 2}, {"Y": y.uid}, **conv),
            node("CONV_DGRAD", "dgrad", {"DY": 3, "W": 2}, {"DX": dx.uid}, **conv),
            node("CONV_WGRAD", "wgrad", {"DY": 3, "X": 1}, {"DW": dw.uid}, **conv),
        ],
    )


def test_batchnorms() -> None:
    g = g_new()
    x, dy = g.tensor("x", (2, 3, 4, 4), uid=1), g.tensor("dy", (2, 3, 4, 4), uid=2)
    p = {n: g.tensor(n, (1, 3, 1, 1), uid=10 + i) for i, n in enumerate(("mean", "inv", "scale", "bias", "rm", "rv"))}
    eps, mom = g.scalar("eps", 1e-3, "float32", uid=20), g.scalar("mom", 0.1, "float32", uid=21)
    y0 = out(g.batchnorm_inference(x, p["mean"], p["inv"], p["scale"], p["bias"], name="bni"), "y0")
    y1, m1, v1, nm, nv = g.batchnorm(x, p["scale"], p["bias"], p["rm"], p["rv"], epsilon=eps, momentum=mom, name="bn")
    dx, ds, db = g.batchnorm_backward(dy, x, p["scale"], m1, v1, name="dbn")
    for t, n in ((y1, "y1"), (nm, "nm"), (nv, "nv"), (dx, "dx"), (ds, "ds"), (db, "db")):
        out(t, n)
    u = {n: t.uid for n, t in p.items()}
    check(
        g,
        [
            node(
                "BATCHNORM_INFERENCE",
                "bni",
                {"X": 1, "MEAN": u["mean"], "INV_VARIANCE": u["inv"], "SCALE": u["scale"], "BIAS": u["bias"]},
                {"Y": y0.uid},
            ),
            node(
                "BATCHNORM",
                "bn",
                {
                    "X": 1,
                    "SCALE": u["scale"],
                    "BIAS": u["bias"],
                    "PREV_RUNNING_MEAN": u["rm"],
                    "PREV_RUNNING_VAR": u["rv"],
                    "EPSILON": 20,
                    "MOMENTUM": 21,
                },
                {
                    "Y": y1.uid,
                    "MEAN": m1.uid,
                    "INV_VARIANCE": v1.uid,
                    "NEXT_RUNNING_MEAN": nm.uid,
                    "NEXT_RUNNING_VAR": nv.uid,
                },
                peer_stats=[],
            ),
            node(
                "DBN",
                "dbn",
                {"DY": 2, "X": 1, "SCALE": u["scale"], "MEAN": m1.uid, "INV_VARIANCE": v1.uid},
                {"DX": dx.uid, "DSCALE": ds.uid, "DBIAS": db.uid},
                peer_stats=[],
            ),
        ],
    )


def test_norms_and_their_backward() -> None:
    g = g_new()
    x, dy = g.tensor("x", (4, 6, 8), uid=1), g.tensor("dy", (4, 6, 8), uid=2)
    scale, bias = g.tensor("scale", (1, 1, 8), uid=3), g.tensor("bias", (1, 1, 8), uid=4)
    eps = g.scalar("eps", 1e-5, "float32", uid=5)
    y, mean, inv = g.layernorm("training", x, scale, bias, epsilon=eps, name="ln")
    dx, ds, db = g.layernorm_backward(dy, x, scale, mean, inv, name="dln")
    z, _ = g.rmsnorm("inference", x, scale, bias, epsilon=eps, name="rms")
    z2, rinv = g.rmsnorm("training", x, scale, epsilon=eps, name="rms2")
    rdx, rds, _ = g.rmsnorm_backward(dy, x, scale, rinv, name="drms")
    for t, n in ((y, "y"), (dx, "dx"), (ds, "ds"), (db, "db"), (z, "z"), (z2, "z2"), (rdx, "rdx"), (rds, "rds")):
        out(t, n)
    check(
        g,
        [
            node(
                "LAYER_NORM",
                "ln",
                {"X": 1, "SCALE": 3, "BIAS": 4, "EPSILON": 5},
                {"Y": y.uid, "MEAN": mean.uid, "INV_VARIANCE": inv.uid},
                forward_phase="TRAINING",
            ),
            node(
                "LAYER_NORM_BPROP",
                "dln",
                {"DY": 2, "X": 1, "SCALE": 3, "MEAN": mean.uid, "INV_VARIANCE": inv.uid},
                {"DX": dx.uid, "DSCALE": ds.uid, "DBIAS": db.uid},
            ),
            node(
                "RMS_NORM",
                "rms",
                {"X": 1, "SCALE": 3, "BIAS": 4, "EPSILON": 5},
                {"Y": z.uid},
                forward_phase="INFERENCE",
            ),
            node(
                "RMS_NORM",
                "rms2",
                {"X": 1, "SCALE": 3, "EPSILON": 5},
                {"Y": z2.uid, "INV_VARIANCE": rinv.uid},
                forward_phase="TRAINING",
            ),
            node(
                "RMS_NORM_BPROP",
                "drms",
                {"DY": 2, "X": 1, "SCALE": 3, "INV_VARIANCE": rinv.uid},
                {"DX": rdx.uid, "DSCALE": rds.uid},
            ),
        ],
    )


def test_matmul_reduction_pooling_and_data_movement() -> None:
    g = g_new()
    a, b, x = g.tensor("a", (2, 4, 6), uid=1), g.tensor("b", (2, 6, 3), uid=2), g.tensor("x", (1, 2, 6, 6), uid=3)
    c = g.matmul(a, b, name="mm")
    r = out(g.reduction(c, "add", dims=(2, 4, 1), name="red"), "r")
    p = out(g.pooling(x, "max", (2, 2), (2, 2), name="pool"), "p")
    t = g.transpose(c, (0, 2, 1), name="tr")
    rs = out(g.reshape(t, (2, 12), name="rs"), "rs")
    s = out(g.slice(c, [slice(0, 2), slice(1, 4)], name="sl"), "s")
    cat = out(g.concatenate([a, a], 2, name="cat"), "cat")
    check(
        g,
        [
            node("MATMUL", "mm", {"A": 1, "B": 2}, {"C": c.uid}, padding_value=0.0),
            node("REDUCTION", "red", {"X": c.uid}, {"Y": r.uid}, mode="ADD", is_deterministic=False),
            node(
                "RESAMPLE",
                "pool",
                {"X": 3},
                {"Y": p.uid},
                compute=False,
                generate_index=None,
                resample_mode="MAXPOOL",
                padding_mode="NEG_INF_PAD",
                pre_padding=[0, 0],
                post_padding=[0, 0],
                stride=[2, 2],
                window=[2, 2],
            ),
            node("TRANSPOSE", "tr", {"X": c.uid}, {"Y": t.uid}, permutation=[0, 2, 1]),
            node("RESHAPE", "rs", {"X": t.uid}, {"Y": rs.uid}, dim=[2, 12], stride=[12, 1], reshape_mode="LOGICAL"),
            node("SLICE", "sl", {"X": c.uid}, {"Y": s.uid}, slices=[[0, 2], [1, 4]], slice_strides=[1]),
            node("CONCATENATE", "cat", {"0": 1, "1": 1}, {"Y": cat.uid}, compute=False, axis=2, in_place_index=None),
        ],
    )


def test_sdpa_forward_and_backward() -> None:
    g = g_new()
    q, k, v, d_o = (g.tensor(n, (1, 2, 5, 8), uid=i + 1) for i, n in enumerate(("q", "k", "v", "do")))
    scale = g.scalar("scale", 0.25, "float32", uid=9)
    o, stats = g.sdpa(q, k, v, attn_scale=scale, use_causal_mask=True, generate_stats=True, name="sdpa")
    dq, dk, dv = g.sdpa_backward(q, k, v, o, d_o, stats, attn_scale=0.25, use_causal_mask=True, name="sdpa_bwd")
    for t, n in ((o, "o"), (stats, "stats"), (dq, "dq"), (dk, "dk"), (dv, "dv")):
        out(t, n)
    common = {
        "alibi_mask": False,
        "padding_mask": False,
        "dropout_probability": None,
        "left_bound": None,
        "right_bound": 0,
        "diagonal_alignment": "TOP_LEFT",
    }
    check(
        g,
        [
            node(
                "SDPA",
                "sdpa",
                {"Q": 1, "K": 2, "V": 3, "Attn_scale": 9},
                {"O": o.uid, "Stats": stats.uid},
                compute=False,
                generate_stats=True,
                stats_use_log2=False,
                attn_scale_value=None,
                max_seq_len_kv=None,
                max_total_seq_len_q=None,
                max_total_seq_len_kv=None,
                mma_core_mode=None,
                implementation="COMPOSITE",
                **common,
            ),
            node(
                "SDPA_BWD",
                "sdpa_bwd",
                {"Q": 1, "K": 2, "V": 3, "O": o.uid, "dO": 4, "Stats": stats.uid},
                {"dQ": dq.uid, "dK": dk.uid, "dV": dv.uid},
                compute=False,
                attn_scale_value=hex_float(0.25),
                max_total_seq_len_q=None,
                max_total_seq_len_kv=None,
                is_deterministic_algorithm=False,
                **common,
            ),
        ],
    )


def _conv_graph() -> tuple[sigdnn.Graph, dict]:
    g = g_new()
    x, w = g.tensor("x", (1, 2, 5, 5), uid=1), g.tensor("w", (3, 2, 3, 3), uid=2)
    y = out(g.conv_fprop(x, w, name="conv"), "y")
    return g, node(
        "CONV_FPROP",
        "conv",
        {"X": 1, "W": 2},
        {"Y": y.uid},
        pre_padding=[0, 0],
        post_padding=[0, 0],
        stride=[1, 1],
        dilation=[1, 1],
        math_mode="CROSS_CORRELATION",
    )


def test_unsupported_tags_come_in_one_error() -> None:
    g, conv = _conv_graph()
    nodes = [node("GENSTATS", "gs", {}, {}), conv, node("RNG", "r1", {}, {}), node("RNG", "r2", {}, {})]
    with pytest.raises(
        GraphError,
        match=r"2 unsupported op type\(s\): GENSTATS \(1 node, first 'gs'\); "
        r"RNG \(2 nodes, first 'r1'\)",
    ):
        cudnn_json.load(graph_json(g, nodes))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"math_mode": "CONVOLUTION"}, "math_mode 'CONVOLUTION'"),
        ({"fancy": 1}, r"unsupported key\(s\) \['fancy'\]"),
        ({"inputs": {"X": 1, "W": 2, "B": 1}}, r"unsupported input port\(s\) \['B'\]"),
        ({"stride": [1, 1, 1]}, "stride has 3 entries"),
    ],
)
def test_unknown_or_unsupported_attributes_are_refused_naming_the_node(change: dict, message: str) -> None:
    g, conv = _conv_graph()
    with pytest.raises(GraphError, match=f"node 'conv'.*{message}"):
        cudnn_json.load(graph_json(g, [{**conv, **change}]))


def test_json_runs_as_a_file_through_sigdnn_io(tmp_path) -> None:
    g, conv = _conv_graph()
    path = tmp_path / "conv.json"
    path.write_bytes(graph_json(g, [conv]))
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32)
    np.testing.assert_array_equal(
        sigdnn.Executor().run(path, {"x": x, "w": w})["y"], sigdnn.Executor().run(g, {"x": x, "w": w})["y"]
    )


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"{",
        b"[]",
        b'{"json_version": "1.0"}',
        b'{"json_version": "2.0", "tensors": {}}',
        b'{"json_version": "2.0", "tensors": [{"uid": "a"}]}',
        b'{"json_version": "2.0", "nodes": [{"tag": 3}]}',
        b"[" * 100000,
    ],
)
def test_malformed_json_is_a_schema_error(text: bytes) -> None:
    with pytest.raises(SchemaError):
        cudnn_json.load(text)


def test_a_half_pass_by_value_rounds_as_the_frontend_does() -> None:
    """The frontend reads a half as a float32 and converts it (__float2half): round to nearest."""
    g, conv = _conv_graph()
    doc = json.loads(graph_json(g, [conv]))
    doc["tensors"].append(
        {
            "data_type": "HALF",
            "dim": [1],
            "stride": [1],
            "is_virtual": False,
            "pass_by_value": {"index": 2, "value": hex_float(0.1)},
            "is_pass_by_value": True,
            "reordering_type": "NONE",
            "uid": 50,
            "name": "h",
        }
    )
    assert cudnn_json.load(json.dumps(doc)).tensors[50].scalar() == np.float16(0.1)
    doc["tensors"][-1]["pass_by_value"]["index"] = 7
    with pytest.raises(SchemaError, match=r"tensor 'h'.*index 7"):
        cudnn_json.load(json.dumps(doc))
