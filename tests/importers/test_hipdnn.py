"""hipDNN buffers, written from the published field layout (hipdnn_writer), import to the graph sigdnn's API builds."""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from hipdnn_writer import graph_buffer

import sigdnn
from sigdnn.errors import GraphError, SchemaError
from sigdnn.importers import hipdnn


def g_new(name: str = "g") -> sigdnn.Graph:
    return sigdnn.Graph(name, io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")


def check(graph: sigdnn.Graph, nodes: list) -> sigdnn.Graph:
    got = hipdnn.load(graph_buffer(graph, nodes))
    assert got == graph
    return got


def out(t: sigdnn.graph.Tensor, name: str) -> sigdnn.graph.Tensor:
    return t.set_output(True).set_name(name)


def test_pointwise_modes_and_parameters() -> None:
    g = g_new()
    a, b, m = g.tensor("a", (2, 3), uid=1), g.tensor("b", (1, 3), uid=2), g.tensor("m", (2, 3), dtype="uint8", uid=3)
    s = g.pointwise("add", a, b, name="add")
    r = g.pointwise("relu_fwd", s, name="relu", relu_lower_clip=-1.0, relu_lower_clip_slope=0.25)
    out(g.pointwise("binary_select", r, a, m, name="sel"), "y")
    # PointwiseAttributes: operation 0, relu_lower_clip 1, relu_upper_clip 2, slope 3, axis 4, in_0 5, in_1 6,
    # in_2 7, out_0 8; PointwiseMode ADD 2, RELU_FWD 34, BINARY_SELECT 4
    check(
        g,
        [
            ("add", None, "Pointwise", {0: ("u8", 2), 5: ("long", 1), 6: ("long", 2), 8: ("long", s.uid)}),
            (
                "relu",
                None,
                "Pointwise",
                {0: ("u8", 34), 1: ("f32", -1.0), 3: ("f32", 0.25), 5: ("long", s.uid), 8: ("long", r.uid)},
            ),
            (
                "sel",
                None,
                "Pointwise",
                {
                    0: ("u8", 4),
                    5: ("long", r.uid),
                    6: ("long", 1),
                    7: ("long", 3),
                    8: ("long", g.tensor_by_name("y").uid),
                },
            ),
        ],
    )


def test_convolutions_forward_and_backward() -> None:
    g = g_new()
    x, w = g.tensor("x", (2, 4, 9, 9), uid=1), g.tensor("w", (6, 4, 3, 3), uid=2)
    dy = g.tensor("dy", (2, 6, 5, 5), uid=3)
    y = out(g.conv_fprop(x, w, padding=(1, 1), stride=(2, 2), name="fprop"), "y")
    dx = out(g.conv_dgrad(dy, w, padding=(1, 1), stride=(2, 2), dims=(2, 4, 9, 9), name="dgrad"), "dx")
    dw = out(g.conv_wgrad(x, dy, padding=(1, 1), stride=(2, 2), dims=(6, 4, 3, 3), name="wgrad"), "dw")
    conv = {3: ("longs", [1, 1]), 4: ("longs", [1, 1]), 5: ("longs", [2, 2]), 6: ("longs", [1, 1]), 7: ("u8", 2)}
    # Fwd: x 0 w 1 y 2; Bwd: dy 0 w 1 dx 2; Wrw: x 0 dy 1 dw 2; then pre 3 post 4 stride 5 dilation 6 conv_mode 7
    check(
        g,
        [
            ("fprop", None, "ConvolutionFwd", {0: ("long", 1), 1: ("long", 2), 2: ("long", y.uid), **conv}),
            ("dgrad", None, "ConvolutionBwd", {0: ("long", 3), 1: ("long", 2), 2: ("long", dx.uid), **conv}),
            ("wgrad", None, "ConvolutionWrw", {0: ("long", 1), 1: ("long", 3), 2: ("long", dw.uid), **conv}),
        ],
    )


def test_batchnorms_inference_training_backward() -> None:
    g = g_new()
    x, dy = g.tensor("x", (2, 3, 4, 4), uid=1), g.tensor("dy", (2, 3, 4, 4), uid=2)
    p = {n: g.tensor(n, (1, 3, 1, 1), uid=10 + i) for i, n in enumerate(("mean", "inv", "scale", "bias", "rm", "rv"))}
    eps, mom = g.scalar("eps", 1e-3, "float32", uid=20), g.scalar("mom", 0.25, "float32", uid=21)
    y0 = out(g.batchnorm_inference(x, p["mean"], p["inv"], p["scale"], p["bias"], name="bni"), "y0")
    y1, m1, v1, nm, nv = g.batchnorm(x, p["scale"], p["bias"], p["rm"], p["rv"], epsilon=eps, momentum=mom, name="bn")
    out(y1, "y1")
    dx, ds, db = g.batchnorm_backward(dy, x, p["scale"], m1, v1, name="bnb")
    for t, n in ((dx, "dx"), (ds, "ds"), (db, "db"), (nm, "nm"), (nv, "nv")):
        out(t, n)
    u = {n: t.uid for n, t in p.items()}
    check(
        g,
        [
            # x 0 mean 1 inv_variance 2 scale 3 bias 4 y 5
            (
                "bni",
                None,
                "BatchnormInference",
                {
                    0: ("long", 1),
                    1: ("long", u["mean"]),
                    2: ("long", u["inv"]),
                    3: ("long", u["scale"]),
                    4: ("long", u["bias"]),
                    5: ("long", y0.uid),
                },
            ),
            # x 0 scale 1 bias 2 epsilon 3 peer_stats 4 prev_mean 5 prev_var 6 momentum 7 y 8 mean 9 inv 10 next 11 12
            (
                "bn",
                None,
                "Batchnorm",
                {
                    0: ("long", 1),
                    1: ("long", u["scale"]),
                    2: ("long", u["bias"]),
                    3: ("long", 20),
                    5: ("long", u["rm"]),
                    6: ("long", u["rv"]),
                    7: ("long", 21),
                    8: ("long", y1.uid),
                    9: ("long", m1.uid),
                    10: ("long", v1.uid),
                    11: ("long", nm.uid),
                    12: ("long", nv.uid),
                },
            ),
            # dy 0 x 1 mean 2 inv_variance 3 scale 4 peer_stats 5 dx 6 dscale 7 dbias 8
            (
                "bnb",
                None,
                "BatchnormBackward",
                {
                    0: ("long", 2),
                    1: ("long", 1),
                    2: ("long", m1.uid),
                    3: ("long", v1.uid),
                    4: ("long", u["scale"]),
                    6: ("long", dx.uid),
                    7: ("long", ds.uid),
                    8: ("long", db.uid),
                },
            ),
        ],
    )


def test_batchnorm_inference_with_variance_becomes_rsqrt_then_batchnorm() -> None:
    g = g_new()
    x = g.tensor("x", (2, 3, 4, 4), uid=1)
    mean, var, scale, bias = (g.tensor(n, (1, 3, 1, 1), uid=2 + i) for i, n in enumerate(("m", "v", "s", "b")))
    eps = g.scalar("eps", 1e-5, "float32", uid=9)
    inv = g.pointwise("rsqrt", g.pointwise("add", var, eps, name="bnv/variance_plus_epsilon"), name="bnv/inv_variance")
    y = out(g.batchnorm_inference(x, mean, inv, scale, bias, name="bnv"), "y")
    # x 0 mean 1 variance 2 scale 3 bias 4 y 5 epsilon 6
    nodes = [
        (
            "bnv",
            None,
            "BatchnormInferenceVarianceExt",
            {
                0: ("long", 1),
                1: ("long", 2),
                2: ("long", 3),
                3: ("long", 4),
                4: ("long", 5),
                5: ("long", y.uid),
                6: ("long", 9),
            },
        )
    ]
    h = sigdnn.Graph("g", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    for t in list(g.tensors.values()):
        if t.uid < 100 and (not t.is_virtual or t is y):
            h.tensors[t.uid] = t
    got = hipdnn.load(graph_buffer(h, nodes))
    assert [(n.name, n.kind) for n in got.nodes] == [(n.name, n.kind) for n in g.nodes]
    assert attrs.evolve(got.nodes[-1].op, inv_variance=0) == attrs.evolve(g.nodes[-1].op, inv_variance=0)
    xs = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype(np.float32)
    params = {
        n: np.abs(np.random.default_rng(1).standard_normal((1, 3, 1, 1))).astype(np.float32) + 0.5
        for n in ("m", "v", "s", "b")
    }
    ex = sigdnn.Executor()
    np.testing.assert_array_equal(ex.run(got, {"x": xs, **params})["y"], ex.run(g, {"x": xs, **params})["y"])


def test_matmul_reduction_and_pooling() -> None:
    g = g_new()
    a, b = g.tensor("a", (2, 4, 5), uid=1), g.tensor("b", (2, 5, 3), uid=2)
    x = g.tensor("x", (1, 2, 6, 6), uid=3)
    c = out(g.matmul(a, b, name="mm"), "c")
    r = out(g.reduction(c, "amax", dims=(2, 1, 3), name="red"), "r")
    p = out(g.pooling(x, "average_count_exclude_pad", (3, 3), (2, 2), (1, 1), name="pool"), "p")
    check(
        g,
        [
            ("mm", None, "Matmul", {0: ("long", 1), 1: ("long", 2), 2: ("long", c.uid)}),
            # mode 0 (AMAX 5) in 1 out 2
            ("red", None, "Reduction", {0: ("u8", 5), 1: ("long", c.uid), 2: ("long", r.uid)}),
            # x 0 y 1 index 2 pre 3 post 4 stride 5 window 6 resample_mode 7 (AVGPOOL_EXCLUDE_PADDING 2) padding_mode 8
            (
                "pool",
                None,
                "ResampleFwd",
                {
                    0: ("long", 3),
                    1: ("long", p.uid),
                    3: ("longs", [1, 1]),
                    4: ("longs", [1, 1]),
                    5: ("longs", [2, 2]),
                    6: ("longs", [3, 3]),
                    7: ("u8", 2),
                    8: ("u8", 2),
                },
            ),
        ],
    )


def test_layernorm_rmsnorm_and_their_backward() -> None:
    g = g_new()
    x = g.tensor("x", (4, 6, 8), uid=1)
    scale, bias = g.tensor("scale", (1, 1, 8), uid=2), g.tensor("bias", (1, 1, 8), uid=3)
    eps = g.scalar("eps", 1e-5, "float32", uid=4)
    dy = g.tensor("dy", (4, 6, 8), uid=5)
    y, mean, inv = g.layernorm("training", x, scale, bias, epsilon=eps, name="ln")
    dx, ds, db = g.layernorm_backward(dy, x, scale, mean, inv, name="lnb")
    z, rinv = g.rmsnorm("training", x, scale, epsilon=eps, name="rms")
    rdx, rds, rdb = g.rmsnorm_backward(dy, x, scale, rinv, has_dbias=True, name="rmsb")
    for t, n in ((y, "y"), (dx, "dx"), (ds, "ds"), (db, "db"), (z, "z"), (rdx, "rdx"), (rds, "rds"), (rdb, "rdb")):
        out(t, n)
    check(
        g,
        [
            # x 0 scale 1 bias 2 epsilon 3 y 4 normalized_dim_count 5 mean 6 inv_variance 7 forward_phase 8 (TRAINING 2)
            (
                "ln",
                None,
                "Layernorm",
                {
                    0: ("long", 1),
                    1: ("long", 2),
                    2: ("long", 3),
                    3: ("long", 4),
                    4: ("long", y.uid),
                    5: ("long", 1),
                    6: ("long", mean.uid),
                    7: ("long", inv.uid),
                    8: ("u8", 2),
                },
            ),
            # dy 0 x 1 scale 2 mean 3 inv_variance 4 epsilon 5 dx 6 dscale 7 dbias 8 normalized_dim_count 9
            (
                "lnb",
                None,
                "LayernormBackward",
                {
                    0: ("long", 5),
                    1: ("long", 1),
                    2: ("long", 2),
                    3: ("long", mean.uid),
                    4: ("long", inv.uid),
                    6: ("long", dx.uid),
                    7: ("long", ds.uid),
                    8: ("long", db.uid),
                    9: ("long", 1),
                },
            ),
            # x 0 scale 1 epsilon 2 y 3 bias 4 inv_rms 5 forward_phase 6
            (
                "rms",
                None,
                "RMSNorm",
                {
                    0: ("long", 1),
                    1: ("long", 2),
                    2: ("long", 4),
                    3: ("long", z.uid),
                    5: ("long", rinv.uid),
                    6: ("u8", 2),
                },
            ),
            # dy 0 x 1 scale 2 inv_rms 3 dx 4 dscale 5 dbias 6
            (
                "rmsb",
                None,
                "RMSNormBackward",
                {
                    0: ("long", 5),
                    1: ("long", 1),
                    2: ("long", 2),
                    3: ("long", rinv.uid),
                    4: ("long", rdx.uid),
                    5: ("long", rds.uid),
                    6: ("long", rdb.uid),
                },
            ),
        ],
    )


def test_sdpa_forward_and_backward() -> None:
    g = g_new()
    q, k, v, d_o = (g.tensor(n, (1, 4, 6, 8), uid=i + 1) for i, n in enumerate(("q", "k", "v", "do")))
    o, stats = g.sdpa(q, k, v, attn_scale=0.125, use_causal_mask=True, generate_stats=True, name="attn")
    dq, dk, dv = g.sdpa_backward(q, k, v, o, d_o, stats, attn_scale=0.125, use_causal_mask=True, name="attn_bwd")
    for t, n in ((o, "o"), (stats, "stats"), (dq, "dq"), (dk, "dk"), (dv, "dv")):
        out(t, n)
    check(
        g,
        [
            # q 0 k 1 v 2 o 3 ... stats 22 ... generate_stats 28 ... causal_mask 31 ... attn_scale_value 34
            (
                "attn",
                None,
                "Sdpa",
                {
                    0: ("long", 1),
                    1: ("long", 2),
                    2: ("long", 3),
                    3: ("long", o.uid),
                    22: ("long", stats.uid),
                    28: ("bool", True),
                    31: ("bool", True),
                    34: ("f32", 0.125),
                },
            ),
            # q 0 k 1 v 2 o 3 do 4 stats 5 dq 6 dk 7 dv 8 ... causal_mask 21 ... attn_scale_value 24
            (
                "attn_bwd",
                None,
                "SdpaBackward",
                {
                    0: ("long", 1),
                    1: ("long", 2),
                    2: ("long", 3),
                    3: ("long", o.uid),
                    4: ("long", 4),
                    5: ("long", stats.uid),
                    6: ("long", dq.uid),
                    7: ("long", dk.uid),
                    8: ("long", dv.uid),
                    21: ("bool", True),
                    24: ("f32", 0.125),
                },
            ),
        ],
    )


def _conv_graph() -> tuple[sigdnn.Graph, int]:
    g = g_new()
    x, w = g.tensor("x", (1, 2, 5, 5), uid=1), g.tensor("w", (3, 2, 3, 3), uid=2)
    y = out(g.conv_fprop(x, w, name="conv"), "y")
    return g, y.uid


def test_unsupported_node_types_come_in_one_error_with_counts_and_first_node() -> None:
    g, y = _conv_graph()
    nodes = [
        ("c1", None, "CustomOp", {}),
        ("conv", None, "ConvolutionFwd", {0: ("long", 1), 1: ("long", 2), 2: ("long", y)}),
        ("c2", None, "CustomOp", {}),
        ("rb", None, "ResampleBwd", {}),
    ]
    with pytest.raises(
        GraphError,
        match=r"2 unsupported op type\(s\): CustomOpAttributes \(2 nodes, first 'c1'\); "
        r"ResampleBwdAttributes \(1 node, first 'rb'\)",
    ):
        hipdnn.load(graph_buffer(g, nodes))


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({7: ("u8", 1)}, "conv_mode CONVOLUTION"),
        ({7: ("u8", 9)}, "unknown conv_mode 9"),
        ({3: ("longs", [0, 0, 0])}, "pre_padding has 3 entries"),
    ],
)
def test_refused_and_bad_attributes_name_the_node(fields: dict, message: str) -> None:
    g, y = _conv_graph()
    base = {0: ("long", 1), 1: ("long", 2), 2: ("long", y)}
    with pytest.raises(GraphError, match=f"node 'conv'.*{message}"):
        hipdnn.load(graph_buffer(g, [("conv", None, "ConvolutionFwd", {**base, **fields})]))


def test_sdpa_features_sigdnn_lacks_are_refused_by_name() -> None:
    g = g_new()
    q, k, v = (g.tensor(n, (1, 2, 4, 8), uid=i + 1) for i, n in enumerate("qkv"))
    o, _ = g.sdpa(q, k, v, name="attn")
    base = {0: ("long", 1), 1: ("long", 2), 2: ("long", 3), 3: ("long", o.uid)}
    with pytest.raises(GraphError, match=r"node 'attn' \(SdpaAttributes\): field\(s\) \['alibi_mask'\]"):
        hipdnn.load(graph_buffer(g, [("attn", None, "Sdpa", {**base, 29: ("bool", True)})]))
    with pytest.raises(GraphError, match=r"node 'attn' \(SdpaAttributes\): padding_mask needs both seq_len_q"):
        hipdnn.load(graph_buffer(g, [("attn", None, "Sdpa", {**base, 30: ("bool", True)})]))
    with pytest.raises(GraphError, match="dropout_probability"):
        hipdnn.load(graph_buffer(g, [("attn", None, "Sdpa", {**base, 33: ("f32", 0.1)})]))
    with pytest.raises(GraphError, match="left_bound 0; a window holds at least"):
        hipdnn.load(graph_buffer(g, [("attn", None, "Sdpa", {**base, 35: ("long", 0)})]))


def test_imported_graph_runs_and_is_detected_by_content(tmp_path) -> None:
    g, y = _conv_graph()
    data = graph_buffer(g, [("conv", None, "ConvolutionFwd", {0: ("long", 1), 1: ("long", 2), 2: ("long", y)})])
    path = tmp_path / "conv.bin"
    path.write_bytes(data)
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal((3, 2, 3, 3)).astype(np.float32)
    ours = sigdnn.Executor().run(path, {"x": x, "w": w})["y"]
    np.testing.assert_array_equal(ours, sigdnn.Executor().run(g, {"x": x, "w": w})["y"])


def test_not_a_hipdnn_buffer_is_a_schema_error() -> None:
    for data in (b"", b"\x00" * 7, b"\xff" * 64):
        with pytest.raises(SchemaError):
            hipdnn.load(data)
