"""Which configurations the CuTe GEMM and implicit-conv builders offer autotune (pure Python, no GPU)."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.matmul import CuteMatmulBuilder, parse_config
from sigdnn.registry.contracts import BuildContext
from sigdnn.signature_keys import key_for


def matmul(m: int, n: int, k: int, dtype: str = "bfloat16", epilogue: str | None = None) -> sigdnn.Graph:
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    a = g.tensor("a", (m, k)).set_data_type(dtype)
    b = g.tensor("b", (k, n), (1, k)).set_data_type(dtype)  # column-major: fp8 wgmma reads K-major operands
    y = g.matmul(a, b, name="mm")
    if epilogue is not None:
        y = g.pointwise("add", y, g.tensor("bias", (1, n)), name="bias")
        y = g.pointwise(epilogue, y, name="act")
    y.set_output(True).set_name("out")
    return g


def configs(g: sigdnn.Graph, nodes=None) -> list[str]:
    return CuteMatmulBuilder().configs(g.nodes if nodes is None else nodes, g)


def test_large_bf16_gemm_offers_its_default_first_then_the_alternatives():
    assert configs(matmul(4096, 4096, 4096)) == ["coop128x256c2x1s4n", "pp64x256c2x1s4n", "coop128x128c1x1s1"]


def test_a_gelu_region_starts_with_pingpong_tiles():
    g = matmul(4096, 4096, 4096, epilogue="gelu_fwd")
    assert configs(g) == ["pp64x256c2x1s4n", "coop128x256c2x1s4n", "coop128x128c1x1s1"]


def test_a_bias_relu_region_keeps_cooperative_tiles_first():
    g = matmul(4096, 4096, 4096, epilogue="relu_fwd")
    assert configs(g)[0] == "coop128x256c2x1s4n"


def test_a_small_gemm_starts_with_unclustered_128x128_tiles():
    assert configs(matmul(256, 512, 1024)) == ["coop128x128c1x1s1", "coop128x256c2x1s4n", "pp64x256c2x1s4n"]


def test_fp8_offers_only_tiles_whose_promoted_accumulators_fit():
    labels = configs(matmul(4096, 4096, 4096, dtype="float8_e4m3fn"))
    assert labels == ["coop128x128c1x2s4", "coop128x128c2x1s4", "coop128x128c1x1s1"]
    assert all(parse_config(label).accumulator_registers(fp8=True) <= 208 for label in labels)


def test_every_offered_label_parses_back_to_itself():
    for g in (matmul(4096, 4096, 4096), matmul(100, 200, 304, epilogue="gelu_fwd")):
        for label in configs(g):
            assert parse_config(label).label == label


def test_an_unknown_label_is_declined_before_the_device_is_asked():
    g = matmul(256, 256, 256)
    node = g.nodes[0]
    context = BuildContext(key_for(node, g), None, g, "coop999x1")
    with pytest.raises(NotSupported, match="node 'mm': bad GEMM config label 'coop999x1'"):
        CuteMatmulBuilder()._launch(*CuteMatmulBuilder().plan(node, g), context.device, context.config, "node 'mm'")


def test_the_environment_override_comes_first(monkeypatch):
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", "pp128x192c1x1s1")
    assert configs(matmul(4096, 4096, 4096))[0] == "pp128x192c1x1s1"


def conv(k: int, hw: int, c: int = 64, epilogue: bool = False) -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (64, c, hw, hw), layout="NHWC"), g.tensor("w", (k, c, 3, 3), layout="NHWC")
    y = g.conv_fprop(x, w, name="conv", padding=(1, 1))
    if epilogue:
        y = g.pointwise("add", y, g.tensor("bias", (1, k, 1, 1), layout="NHWC"), name="bias")
        y = g.pointwise("relu_fwd", y, name="act")
    y.set_output(True)
    return g


def conv_configs(g: sigdnn.Graph) -> list[str]:
    from sigdnn.plan_builders.cute.conv_implicit import CuteConvImplicitBuilder

    return CuteConvImplicitBuilder().configs(g.nodes, g)


def test_conv_offers_its_heuristic_default_first_then_the_wide_tiles_then_their_splits():
    assert conv_configs(conv(64, 56)) == [
        "coop256x64c1x1s1", "coop256x128c1x1s1", "coop128x256c1x1s1", "coop128x128c1x1s1", "pp128x128c1x1s1",
        "coop256x64c1x1s1k2", "coop256x64c1x1s1t2", "coop256x64c1x1s1x",
    ]  # fmt: skip
    assert conv_configs(conv(256, 14))[:2] == ["coop128x256c1x1s1", "coop256x64c1x1s1"]
    assert conv_configs(conv(256, 14))[-2:] == ["coop128x256c1x1s1k2", "coop128x256c1x1s1x"]  # 98 tiles: no tail


def test_a_late_stage_conv_region_starts_with_square_tiles():
    labels = conv_configs(conv(512, 7, c=512, epilogue=True))  # 100 tiles of 128x128, not 50 of 128x256
    assert labels[0] == "coop128x128c1x1s1" and len(labels) == len(set(labels)) == 7
    assert labels[-2:] == ["coop128x256c1x1s1k2", "coop128x256c1x1s1x"]


def test_a_fused_epilogue_on_narrow_tiles_runs_pingpong():
    """conv2_3x3 + bias + relu: pingpong 128x64 tiles, where the plain conv keeps cooperative 256x64; a wider
    fused conv keeps its cooperative tile."""
    assert conv_configs(conv(64, 56, epilogue=True))[0] == "pp128x64c1x1s1"
    assert conv_configs(conv(64, 56))[0] == "coop256x64c1x1s1"
    assert conv_configs(conv(128, 28, c=128, epilogue=True))[0] == "coop128x128c1x1s1"
    assert conv_configs(conv(256, 14, c=256, epilogue=True))[0] == "coop128x256c1x1s1"


@pytest.mark.parametrize("part", ["bias", "act"])
def test_a_bias_or_an_activation_alone_is_a_fused_epilogue(part):
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (64, 64, 56, 56), layout="NHWC"), g.tensor("w", (64, 64, 3, 3), layout="NHWC")
    y = g.conv_fprop(x, w, name="conv", padding=(1, 1))
    if part == "bias":
        y = g.pointwise("add", y, g.tensor("bias", (1, 64, 1, 1), layout="NHWC"), name="bias")
    else:
        y = g.pointwise("relu_fwd", y, name="act")
    y.set_output(True)
    assert conv_configs(g)[0] == "pp128x64c1x1s1"


@pytest.mark.parametrize(
    ("n", "hw", "c", "k", "r", "stride", "label"),
    [
        (64, 56, 64, 64, 3, 1, "coop256x64c1x1s1"),  # 784 tiles: a last wave of 124
        (64, 28, 128, 128, 3, 1, "coop128x128c1x1s1"),  # 392 tiles in 3 waves, not 196 of 256x128 in 2
        (64, 56, 128, 128, 3, 2, "coop128x128c1x1s1"),  # the same GEMM with stride 2
        (64, 14, 256, 256, 3, 1, "coop128x256c1x1s1"),  # 98 tiles in one wave, not 196 of 128x128 in 2
        (64, 7, 512, 512, 3, 1, "coop128x128c1x1s1"),  # 100 tiles of 128x128 in one wave, not 50 wide ones
        (64, 7, 2048, 512, 1, 1, "coop128x128c1x1s1"),
        (64, 7, 256, 512, 1, 1, "coop128x128c1x1s1"),  # 100 tiles, 4 K steps
        (64, 7, 512, 256, 3, 1, "coop128x128c1x1s1k2"),  # 50 tiles of 128x128, 72 K steps: split in two
        (64, 7, 256, 256, 1, 1, "pp128x128c1x1s1"),  # 50 tiles, 4 K steps: too shallow to split
        (64, 14, 256, 1024, 1, 1, "coop128x256c1x1s1"),  # 392 tiles: a last wave of 128
    ],
)
def test_default_conv_config_of_resnet_layers(n, hw, c, k, r, stride, label):
    from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config

    assert default_conv_config(conv_view(n, hw, c, k, r, stride), 132).label == label


def test_conv_keeps_the_environment_override_first(monkeypatch):
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", "coop128x128c1x1s1")
    assert conv_configs(conv(64, 56))[0] == "coop128x128c1x1s1"


def test_a_conv_label_that_does_not_parse_is_declined_naming_the_node():
    from sigdnn.plan_builders.cute.conv_implicit import CuteConvImplicitBuilder, plan_conv

    g = conv(64, 56)
    with pytest.raises(NotSupported, match="node 'conv': bad GEMM config label"):
        CuteConvImplicitBuilder()._launch(plan_conv(g.nodes[0], g), None, "tile9", "node 'conv'")


def test_split_labels_round_trip_and_share_one_kernel():
    for label in ("coop128x256c1x1s1k2", "coop256x128c1x1s1t3", "coop128x64c1x1s1k16"):
        config = parse_config(label)
        assert config.label == label and config.split_k > 1
        assert config.kernel == parse_config(label[: label.rindex("s1") + 2] + "k2")
    assert parse_config("coop128x256c1x1s1").kernel == parse_config("coop128x256c1x1s1")


@pytest.mark.parametrize(
    "label", ["pp128x128c1x1s1k2", "coop128x256c2x1s1k2", "coop128x256c1x1s4k2", "coop128x256c1x1s1k17"]
)
def test_split_k_needs_an_unclustered_cooperative_kernel(label):
    with pytest.raises(ValueError):
        parse_config(label)


@pytest.mark.parametrize("label", ["pp128x64c1x8s1", "coop256x128c4x1s1", "coop128x128c2x2s1", "coop128x128c2x4s1"])
def test_clusters_of_powers_of_two_up_to_eight_parse(label):
    config = parse_config(label)
    assert config.label == label and config.cluster_m * config.cluster_n <= 8


@pytest.mark.parametrize("label", ["coop128x128c3x1s1", "coop128x128c1x6s1", "coop128x128c4x4s1", "pp128x64c1x16s1"])
def test_clusters_past_eight_or_not_powers_of_two_are_refused(label):
    with pytest.raises(ValueError):
        parse_config(label)


def test_a_persistent_grid_holds_only_the_clusters_that_fit_at_once():
    """On a 132-SM part a cluster stays inside one GPC: 30 of 4 and 15 of 8 resident, not 33 and 16."""
    from sigdnn.plan_builders.cute.gemm_layout import resident_clusters

    assert [resident_clusters(132, size) for size in (1, 2, 4, 8, 16)] == [132, 66, 30, 15, 8]
    assert [resident_clusters(114, size) for size in (1, 2, 4, 8)] == [114, 57, 28, 14]


@pytest.mark.parametrize(
    "fields",
    [
        {"tile_m": 256, "tile_n": 64, "pingpong": True},  # pingpong rows: 64 or 128
        {"tile_m": 64, "tile_n": 128},  # cooperative rows: 128 or 256
        {"tile_m": 128, "tile_n": 24},  # N a multiple of 16
        {"tile_m": 64, "tile_n": 24, "pingpong": True},
        {"tile_m": 128, "tile_n": 0},
        {"tile_m": 128, "tile_n": 272},  # N at most 256
        {"tile_m": 64, "tile_n": 272, "pingpong": True},
        {"tile_m": 128, "tile_n": 0, "pingpong": True},
        {"tile_m": 256, "tile_n": 256},  # 256 accumulator registers a thread
        {"tile_m": 128, "tile_n": 224, "pingpong": True},  # 224
        {"swizzle": 0},
    ],
)
def test_tiles_the_kernel_cannot_hold_are_refused(fields):
    from sigdnn.plan_builders.cute.gemm_layout import GemmConfig

    with pytest.raises(ValueError):
        GemmConfig(**fields)


@pytest.mark.parametrize(
    "fields",
    [
        {"tile_m": 128, "tile_n": 16},
        {"tile_m": 64, "tile_n": 16, "pingpong": True},
        {"tile_m": 256, "tile_n": 208},  # 208 accumulator registers: the most that fit
        {"tile_m": 128, "tile_n": 208, "pingpong": True},
        {"tile_m": 64, "tile_n": 256, "pingpong": True},
    ],
)
def test_tiles_at_the_limits_are_accepted(fields):
    from sigdnn.plan_builders.cute.gemm_layout import GemmConfig

    assert GemmConfig(**fields).tile_n == fields["tile_n"]


def conv_view(n: int, hw: int, c: int, k: int, r: int = 3, stride: int = 1):
    from sigdnn.plan_builders.cute.conv_implicit import plan_conv

    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (n, c, hw, hw), layout="NHWC"), g.tensor("w", (k, c, r, r), layout="NHWC")
    g.conv_fprop(x, w, name="conv", padding=(r // 2, r // 2), stride=(stride, stride)).set_output(True)
    return plan_conv(g.nodes[0], g)


def test_split_k_plan_of_conv5():
    from sigdnn.plan_builders.cute.conv_geometry import split_k_plan

    view = conv_view(64, 7, 512, 512)  # 25 x 2 tiles of 128x256, 8 channel blocks x 9 taps = 72 K tiles
    plan = split_k_plan(view.geometry, parse_config("coop128x256c1x1s1k5"), 132)
    assert (plan.splits, plan.whole, plan.sk_segments, plan.slots, plan.counters) == (5, 0, 0, 200, 50)
    assert plan.workspace_bytes == 200 * 128 * 256 * 4 + 50 * 4


def test_split_tail_leaves_the_full_waves_whole():
    from sigdnn.plan_builders.cute.conv_geometry import split_k_plan

    view = conv_view(64, 56, 128, 128, stride=2)  # 196 tiles of 256x128, 2 x 9 = 18 K tiles
    plan = split_k_plan(view.geometry, parse_config("coop256x128c1x1s1t2"), 132)
    assert (plan.splits, plan.whole, plan.slots, plan.counters) == (2, 132, 64, 64)
    every = split_k_plan(view.geometry, parse_config("coop256x128c1x1s1k2"), 132)
    assert (every.whole, every.slots) == (0, 196)


def test_split_count_is_capped_at_the_k_tiles():
    from sigdnn.plan_builders.cute.conv_geometry import split_k_plan

    view = conv_view(2, 9, 16, 24)  # one channel block x 9 taps; 162 pixels: 2 tiles
    plan = split_k_plan(view.geometry, parse_config("coop128x64c1x1s1k16"), 132)
    assert (plan.splits, plan.slots) == (9, 16)


def test_a_split_too_large_for_the_kernels_offsets_is_declined():
    from sigdnn.plan_builders.cute.conv_geometry import split_k_plan

    view = conv_view(256, 112, 64, 256)  # 25088 tiles of 128x256, split 16 ways
    with pytest.raises(ValueError, match="32-bit workspace offsets"):
        split_k_plan(view.geometry, parse_config("coop128x256c1x1s1k16"), 132)


def test_matmul_declines_split_k_named_or_from_the_environment(monkeypatch):
    g = matmul(256, 256, 256)
    builder = CuteMatmulBuilder()
    with pytest.raises(NotSupported, match="split-K is the conv fprop's"):
        builder._launch(*builder.plan(g.nodes[0], g), None, "coop128x128c1x1s1k2", "mm")
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", "coop128x128c1x1s1x")
    with pytest.raises(NotSupported, match="split-K is the conv fprop's"):
        builder._launch(*builder.plan(g.nodes[0], g), None, None, "mm")


def test_matmul_lets_unsplit_configs_through_to_the_launch():
    g = matmul(256, 256, 256)
    builder = CuteMatmulBuilder()
    try:
        builder._launch(*builder.plan(g.nodes[0], g), None, "coop128x128c1x1s1", "mm")
    except NotSupported as exc:
        pytest.fail(f"declined an unsplit config: {exc}")
    except (ImportError, RuntimeError):
        pass  # past the check: no GPU or no CUDA bindings on this machine


def test_a_tail_split_needs_a_split_count():
    from sigdnn.plan_builders.cute.gemm_layout import GemmConfig

    with pytest.raises(ValueError, match="split_tail without split_k"):
        GemmConfig(split_tail=True)


def test_stream_k_plan_of_conv5_spreads_every_tile_over_the_sms():
    from sigdnn.plan_builders.cute.conv_geometry import split_k_plan

    view = conv_view(64, 7, 512, 512)  # 50 tiles x 72 K tiles = 3600 iterations: ranges of 27 or 28
    plan = split_k_plan(view.geometry, parse_config("coop128x256c1x1s1x"), 132)
    assert (plan.splits, plan.whole, plan.sk_segments, plan.slots, plan.counters) == (0, 0, 2, 132, 50)


def test_stream_k_leaves_all_but_the_last_full_wave_whole():
    from sigdnn.plan_builders.cute.conv_geometry import split_k_plan

    view = conv_view(64, 56, 64, 64)  # 784 tiles of 256x64, 9 K tiles: 528 whole, 256 x 9 over 132
    plan = split_k_plan(view.geometry, parse_config("coop256x64c1x1s1x"), 132)
    assert (plan.whole, plan.sk_segments, plan.slots, plan.counters) == (528, 3, 132, 256)
    assert parse_config("coop256x64c1x1s1x").kernel == parse_config("coop256x64c1x1s1k2").kernel


def test_stream_k_takes_no_split_count():
    with pytest.raises(ValueError, match="stream-K sets its own split"):
        parse_config("coop128x256c1x1s1k2x")


def view_of(m: int, k: int, c: int = 64, taps: int = 3, stride: tuple[int, int] = (1, 1)):
    """An ImplicitConv of M = m output pixels in one row (N = 1), k output channels, c input channels."""
    from sigdnn.plan_builders.cute.conv_geometry import ImplicitConv
    from sigdnn.plan_builders.cute.gemm_layout import GemmSpec

    spec = GemmSpec("bfloat16", "bfloat16", "bfloat16", "k", "k", "n", False, False)
    w = (m - 1) * stride[1] + taps
    h = stride[0] + taps - 1 if stride[0] > 1 else taps
    p = (h - taps) // stride[0] + 1
    assert p == 1
    return ImplicitConv(spec, (1, h, w, c, k, taps, taps, p, m, 0, 0, 0, 0, *stride, 1, 1))


@pytest.mark.parametrize(
    ("tiles", "c", "sm", "label"),
    [
        (65, 64, 132, "coop256x64c1x1s1k2"),  # fewer than half the SMs' worth, 9 K steps
        (66, 64, 132, "coop256x64c1x1s1"),  # exactly half: not split
        (64, 64, 131, "coop256x64c1x1s1k2"),
        (65, 64, 131, "coop256x64c1x1s1"),  # 65 is not below 131 // 2
        (132, 64, 132, "coop256x64c1x1s1"),  # one full wave
        (133, 64, 132, "coop256x64c1x1s1t2"),  # a last wave of one tile
        (198, 64, 132, "coop256x64c1x1s1t2"),  # a last wave of 66: half full
        (199, 64, 132, "coop256x64c1x1s1"),
        (264, 64, 132, "coop256x64c1x1s1"),  # two full waves
    ],
)
def test_default_split_boundaries(tiles, c, sm, label):
    from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config

    assert default_conv_config(view_of(256 * tiles, 64, c), sm).label == label


@pytest.mark.parametrize(
    ("m", "k", "label"),
    [
        (256 * 132, 128, "coop256x128c1x1s1"),  # one wave of 256x128 against two of 128x128
        (256 * 196, 128, "coop128x128c1x1s1"),  # two waves (4 units of area) against three (3 x 1.25)
        (256 * 170, 128, "coop128x128c1x1s1"),  # 170 wide tiles (2 waves), 340 square ones (3 waves)
        (128 * 132 * 2, 256, "coop128x256c1x1s1"),  # 264 wide tiles in 2 waves, 528 square in 4
        (256 * 196, 64, "coop256x64c1x1s1t2"),  # 64 output channels: no square tile (its last wave split)
    ],
)
def test_square_tiles_where_their_waves_cost_less(m, k, label):
    from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config

    assert default_conv_config(view_of(m, k), 132).label == label


def test_default_split_needs_eight_k_steps_and_unit_stride():
    from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config

    assert view_of(256 * 10, 64, c=512, taps=1).k_tiles == 8
    assert default_conv_config(view_of(256 * 10, 64, c=512, taps=1)).label == "coop256x64c1x1s1k2"
    assert default_conv_config(view_of(256 * 10, 64, c=448, taps=1)).label == "pp128x128c1x1s1"  # 7 K steps
    assert default_conv_config(view_of(256 * 133, 64)).label == "coop256x64c1x1s1t2"  # the H200's 132 by default
    assert default_conv_config(view_of(256 * 133, 64, stride=(1, 2))).label == "coop256x64c1x1s1"
    assert default_conv_config(view_of(256 * 133, 64, stride=(2, 1))).label == "coop256x64c1x1s1"


@pytest.mark.parametrize(("k", "tile"), [(64, "256x64"), (65, "256x128"), (128, "256x128"), (129, "128x256")])
def test_the_wide_tile_follows_the_output_channels(k, tile):
    from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config

    assert default_conv_config(view_of(256 * 264, k)).label == f"coop{tile}c1x1s1"  # whole waves: no split


def test_split_alternatives_need_two_k_steps_and_offer_the_tail_split_past_one_wave():
    from sigdnn.plan_builders.cute.conv_implicit_configs import split_alternatives

    assert split_alternatives(view_of(256 * 10, 64, c=64, taps=1)) == []
    assert split_alternatives(view_of(256 * 10, 64, c=128, taps=1)) == ["coop256x64c1x1s1k2", "coop256x64c1x1s1x"]
    assert split_alternatives(view_of(256 * 132, 64)) == ["coop256x64c1x1s1k2", "coop256x64c1x1s1x"]
    assert split_alternatives(view_of(256 * 133, 64)) == [
        "coop256x64c1x1s1k2", "coop256x64c1x1s1t2", "coop256x64c1x1s1x"
    ]  # fmt: skip


def test_split_of_one_k_step_is_no_split():
    from sigdnn.plan_builders.cute.conv_geometry import split_k_plan

    plan = split_k_plan(view_of(256 * 10, 64, taps=1).geometry, parse_config("coop256x64c1x1s1k2"), 132)
    assert (plan.splits, plan.slots, plan.counters, plan.workspace_bytes) == (1, 0, 0, 0)


def test_stream_k_segments_count_every_tile_a_range_touches():
    import attrs

    from sigdnn.plan_builders.cute.conv_geometry import split_k_plan

    # 150 tiles x 9 K steps = 1350 iterations: ranges of up to 11, which can touch 3 tiles (1 + 9 + 1)
    plan = split_k_plan(view_of(256 * 150, 64).geometry, parse_config("coop256x64c1x1s1x"), 132)
    assert (plan.whole, plan.sk_segments, plan.slots, plan.counters) == (0, 3, 132, 150)
    assert all(type(v) is int for v in attrs.astuple(plan))


def test_stream_k_past_the_kernels_arithmetic_is_declined():
    from sigdnn.plan_builders.cute.conv_geometry import split_k_plan

    view = view_of(128 * 100, 8, c=2**24, taps=7)  # 100 tiles x 1.8M K steps
    with pytest.raises(ValueError, match="stream-K iterations, past the kernel's 32-bit arithmetic"):
        split_k_plan(view.geometry, parse_config("coop128x64c1x1s1x"), 132)
