"""The CuTe implicit-GEMM conv fprop (TMA im2col + Hopper GEMM) on a GPU, judged by sigdnn.validate.

Against the float64 reference, 2-D and 3-D: spatial sizes off every tile, channel counts
off the 64-deep K tile (C = 8, 24, 40, 72) and off the N tile, padding
(asymmetric too), stride 2 and 3, dilation, 1x1 / 5x1 / 7x7 filters, 16- and
32-bit outputs; every tile config the benchmark measures; fused bias /
activation epilogues as one region; split-K configs (the K loop of a tile
cut across CTAs, float32 partials added by the last split) on channel and
output-channel tails, several units per CTA, capped split counts, split tails
only, fused bias + activation applied once to the full sum, and repeated
launches of one plan on new inputs (the tile counters must be back at zero).
A planted bug (the window shifted by one pixel) must fail validation, with
and without split-K. Skips without a GPU, without nvidia-cutlass-dsl, or on a
device other than sm_90.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from cute_skip import skip_unless_sm90

import sigdnn
import sigdnn.validation
from sigdnn.plan_builders.cute import conv_implicit

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe implicit-GEMM conv")

ENGINE = "cute.conv_fprop_implicit"
CASES = {
    # name: (x dims, w dims, io dtype, out dtype, conv arguments)
    "3x3_pad1": ((2, 16, 9, 11), (24, 16, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "strided_dilated_asymmetric_f32": (
        (3, 8, 13, 10),
        (16, 8, 3, 3),
        "bfloat16",
        "float32",
        {"pre_padding": (1, 2), "post_padding": (0, 1), "stride": (2, 1), "dilation": (2, 2)},
    ),
    "pointwise": ((2, 32, 7, 5), (40, 32, 1, 1), "float16", "float16", {}),
    "5x1_stride_1x3": ((1, 24, 17, 19), (8, 24, 5, 1), "float16", "float32", {"stride": (1, 3)}),
    "resnet_like_3x3": ((4, 64, 28, 28), (64, 64, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "stride2_channel_tails": (
        (3, 72, 15, 13),
        (136, 72, 3, 3),
        "bfloat16",
        "bfloat16",
        {"padding": (1, 1), "stride": (2, 2)},
    ),
    "pointwise_stride2": ((2, 64, 9, 9), (48, 64, 1, 1), "bfloat16", "bfloat16", {"stride": (2, 2)}),
    "7x7_stem_like": ((2, 8, 23, 21), (32, 8, 7, 7), "float16", "float16", {"padding": (3, 3), "stride": (2, 2)}),
    "deep_k": ((2, 256, 7, 7), (264, 256, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "valid_no_padding": ((2, 40, 10, 12), (56, 40, 3, 3), "float16", "float32", {}),
    "wide_dilation": (
        (1, 16, 20, 19),
        (16, 16, 3, 3),
        "bfloat16",
        "bfloat16",
        {"padding": (4, 3), "dilation": (4, 3)},
    ),
}
CASES_3D = {
    # 3-D (NDHWC): the im2col box of a rank-5 tensor, the K loop over (channel block, s, r, t)
    "3d_3x3x3_pad1": ((2, 16, 5, 7, 6), (24, 16, 3, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1, 1)}),
    "3d_strided_dilated_f32": (
        (1, 24, 9, 8, 10),
        (40, 24, 3, 2, 3),
        "float16",
        "float32",
        {"pre_padding": (1, 0, 2), "post_padding": (2, 1, 0), "stride": (2, 1, 2), "dilation": (1, 2, 2)},
    ),
    "3d_pointwise": ((2, 64, 3, 5, 4), (72, 64, 1, 1, 1), "bfloat16", "bfloat16", {}),
}
# Tile configs: cooperative / pingpong, A multicast through the im2col TMA, B multicast.
CONFIGS = ["coop128x64c1x1s1", "coop256x64c1x1s1", "coop128x256c1x1s1", "coop256x128c1x1s1", "pp64x128c1x1s1",
           "pp128x128c1x1s1", "coop128x128c2x1s4", "coop128x128c1x2s1"]  # fmt: skip
# Clusters of 4 and 8: one A tile multicast to 8 CTAs along N (cuDNN's conv5_3x3 shape), B to 4 along M, both
# ways in a 2x2 cluster. On the small cases most of a cluster's CTAs hold tiles past M or N: they still take
# part in every multicast and store nothing.
CLUSTER_CONFIGS = ["pp128x64c1x8s1", "coop128x64c1x8s1", "coop128x128c1x4s1", "coop256x128c4x1s1",
                   "coop128x128c2x2s1", "pp64x128c4x1s1"]  # fmt: skip
SPLIT_CASES = [
    # (config label, case). Split-K (k, t) and stream-K (x) over 9 to 72 K tiles; with 128x64 tiles, 114 to
    # 324 output tiles: several units per CTA, and waits across waves of units.
    ("coop128x256c1x1s1k2", "deep_k"),  # 36 K tiles, output channels 264: a second, 8-wide N tile
    ("coop256x128c1x1s1k3", "stride2_channel_tails"),  # C = 72 (a 64 + 8 K tail per tap), K = 136
    ("coop128x64c1x1s1k4", "split_many_units"),  # 456 units on 132 CTAs; C = 40, K = 72
    ("coop128x64c1x1s1t3", "split_tail"),  # 132 whole tiles, then 30 tiles in 3
    ("coop128x128c1x1s1k16", "strided_dilated_asymmetric_f32"),  # 9 K tiles: 9 splits; float32 out
    ("coop128x64c1x1s1x", "split_many_units"),  # 1026 K iterations over 132 ranges of 7 or 8
    ("coop128x64c1x1s1x", "stream_k_hybrid"),  # 132 whole tiles, then 192 tiles over 132 ranges
    ("coop256x128c1x1s1x", "stride2_channel_tails"),  # 36 iterations over 132 ranges: most empty, 18 parts
]
CASES_SPLIT = {
    "split_many_units": ((8, 40, 30, 30), (72, 40, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "split_tail": ((8, 40, 36, 36), (72, 40, 3, 3), "float16", "float16", {"padding": (1, 1)}),
    "stream_k_hybrid": ((16, 40, 36, 36), (72, 40, 3, 3), "bfloat16", "float32", {"padding": (1, 1)}),
}
SPLIT_FUSED_CONFIG = "coop128x64c1x1s1k3"  # also the planted bug's split config
SPLIT_FUSED = ("bias_relu", "bias_gelu", "bias_relu_f32_mid")
STREAM_K_CONFIG = "coop128x64c1x1s1x"
FUSED = {
    # name: (x dims, w dims, io dtype, intermediate dtype, bias, activation)
    "bias_relu": ((2, 24, 11, 9), (40, 24, 3, 3), "bfloat16", "bfloat16", True, "relu_fwd"),
    "bias_relu_f32_mid": ((3, 64, 14, 14), (72, 64, 3, 3), "float16", None, True, "relu_fwd"),
    "bias_only": ((2, 16, 9, 9), (32, 16, 3, 3), "bfloat16", None, True, None),
    "relu_only": ((2, 16, 9, 9), (32, 16, 1, 1), "float16", "float16", False, "relu_fwd"),
    "bias_gelu": ((2, 32, 8, 8), (48, 32, 3, 3), "bfloat16", "bfloat16", True, "gelu_fwd"),
    "3d_bias_relu": ((2, 16, 4, 6, 5), (32, 16, 3, 3, 3), "bfloat16", "bfloat16", True, "relu_fwd"),
}


def case(name: str) -> tuple:
    return {**CASES, **CASES_3D, **CASES_SPLIT}[name]


def conv_graph(x_dims, w_dims, dtype: str, out: str, conv: dict) -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype=dtype, compute_dtype="float32")
    layout = "NHWC" if len(x_dims) == 4 else "NDHWC"
    x = g.tensor("x", x_dims, layout=layout)
    w = g.tensor("w", w_dims, layout=layout)
    g.conv_fprop(x, w, name="conv", **conv).set_output(True).set_name("y").set_data_type(out)
    return g


def fused_graph(x_dims, w_dims, dtype: str, mid: str | None, bias: bool, act: str | None) -> sigdnn.Graph:
    g = sigdnn.Graph("fused", io_dtype=dtype, intermediate_dtype=mid, compute_dtype="float32")
    layout = "NHWC" if len(x_dims) == 4 else "NDHWC"
    x = g.tensor("x", x_dims, layout=layout)
    w = g.tensor("w", w_dims, layout=layout)
    y = g.conv_fprop(x, w, name="conv", padding=tuple(t // 2 for t in w_dims[2:]))
    if bias:
        bias_dims = (1, w_dims[0]) + (1,) * (len(x_dims) - 2)
        y = g.pointwise("add", y, g.tensor("bias", bias_dims, layout=layout), name="bias")
    if act:
        y = g.pointwise(act, y, name="act")
    y.set_output(True).set_name("out")
    return g


def validate(g: sigdnn.Graph, seed: int) -> sigdnn.ValidationReport:
    report = sigdnn.validate(g, seed=seed, executor=sigdnn.Executor("gpu", engine=ENGINE))
    print(report.table())
    return report


@pytest.mark.parametrize("name", list(CASES) + list(CASES_3D))
def test_conv_fprop_validates_against_the_reference(name: str) -> None:
    report = validate(conv_graph(*{**CASES, **CASES_3D}[name]), 13)
    assert report.builders == {"conv": ENGINE}
    assert report.passed, report.table()


@pytest.mark.parametrize("config", CONFIGS + CLUSTER_CONFIGS)
@pytest.mark.parametrize("name", ["stride2_channel_tails", "strided_dilated_asymmetric_f32"])
def test_every_config_validates(name: str, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    g = conv_graph(*CASES[name])
    plan = sigdnn.Executor("gpu", engine=ENGINE).prepare(g)
    assert plan.steps[0].plan.config.label == config
    assert validate(g, 17).passed


@pytest.mark.parametrize("config", CLUSTER_CONFIGS)
@pytest.mark.parametrize("name", ["resnet_like_3x3", "deep_k", "split_many_units"])
def test_cluster_configs_validate_over_many_tiles(name: str, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Persistent clusters walking several tiles each (3136 x 64, 98 x 264, 7200 x 72 outputs), so a stage's
    multicast release reaches CTAs already on their next tile."""
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    g = conv_graph(*case(name))
    plan = sigdnn.Executor("gpu", engine=ENGINE).prepare(g)
    assert plan.steps[0].plan.config.label == config
    assert validate(g, 19).passed


@pytest.mark.parametrize("name", list(FUSED))
def test_fused_epilogue_validates(name: str) -> None:
    report = validate(fused_graph(*FUSED[name]), 5)
    last = "act" if FUSED[name][5] else "bias"
    assert report.builders == {f"region(conv..{last})": ENGINE}
    assert report.passed, report.table()


@pytest.mark.parametrize(("config", "name"), SPLIT_CASES)
def test_split_k_validates(config: str, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    g = conv_graph(*case(name))
    plan = sigdnn.Executor("gpu", engine=ENGINE).prepare(g)
    launch = plan.steps[0].plan._launch
    assert launch.config.label == config and launch.split is not None and launch.split.slots > 0
    report = validate(g, 19)
    assert report.passed, report.table()


@pytest.mark.parametrize("config", [SPLIT_FUSED_CONFIG, STREAM_K_CONFIG])
@pytest.mark.parametrize("name", SPLIT_FUSED)
def test_split_k_applies_the_fused_epilogue_once(name: str, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Bias and activation on the full sum only: per part, the bias would count several times and relu
    would clip partial sums."""
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    report = validate(fused_graph(*FUSED[name]), 23)
    assert report.passed, report.table()


@pytest.mark.parametrize("config", ["coop128x64c1x1s1k4", STREAM_K_CONFIG])
def test_split_k_relaunches_on_new_inputs_match_a_fresh_plan(config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """One plan launched again and again: its counters must be back at zero after each launch (or a last
    split would add partials before they are written), and the split sums are deterministic."""
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    g = conv_graph(*case("split_many_units"))
    ex = sigdnn.Executor("gpu", engine=ENGINE)
    plan = ex.prepare(g)
    for seed in (1, 2, 3):
        data = sigdnn.validation.random_inputs(g, seed=seed)
        got = ex.execute(plan, data)["y"]
        want = sigdnn.Executor("gpu", engine=ENGINE).run(g, data)["y"]
        assert np.array_equal(got.view(np.uint16), want.view(np.uint16)), seed


@pytest.mark.parametrize("config", [None, SPLIT_FUSED_CONFIG])
def test_a_window_shifted_by_one_pixel_fails_validation(config: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: one more pixel of left padding and one less of right keeps every extent but moves
    every window; the validation this file relies on must see it, split-K or not."""
    if config:
        monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    real = conv_implicit.plan_conv

    def shifted(node, graph, chain=None):
        view = real(node, graph, chain)
        g = list(view.geometry)
        g[10] += 1  # pad_w
        g[12] -= 1  # pad_w_hi
        return attrs.evolve(view, geometry=tuple(g))

    monkeypatch.setattr(conv_implicit, "plan_conv", shifted)
    report = validate(conv_graph(*CASES["3x3_pad1"]), 13)
    assert report.builders == {"conv": ENGINE}
    assert not report.passed
