"""How the CuTe wgrad builder reads a conv wgrad as a split-K GEMM (pure Python, no GPU)."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.conv_wgrad import (
    CuteConvWgradBuilder,
    CuteConvWgradImplicitBuilder,
    CuteConvWgradRowsBuilder,
    plan_wgrad,
    plan_wgrad_implicit,
    plan_wgrad_rows,
    row_slices,
    rows_reason,
    split_count,
)
from sigdnn.plan_builders.cute.conv_wgrad_model import (
    ALTERNATIVES,
    WgradShape,
    best_splits,
    modelled_us,
    ranked_configs,
    slice_steps,
    split_choices,
    wgrad_tile_configs,
)
from sigdnn.plan_builders.cute.gemm_layout import GemmProblem, GemmSpec
from sigdnn.plan_builders.cute.matmul import parse_config


def wgrad_graph(x_dims=(2, 16, 9, 11), dw_dims=(24, 16, 3, 3), *, dtype="bfloat16", layout="NHWC", **conv):
    conv = {"padding": (1, 1), **conv}
    probe = sigdnn.Graph("probe", io_dtype=dtype, compute_dtype="float32")
    y = probe.conv_fprop(probe.tensor("x", x_dims, layout=layout), probe.tensor("w", dw_dims, layout=layout), **conv)
    g = sigdnn.Graph("wgrad", io_dtype=dtype, compute_dtype="float32")
    x, dy = g.tensor("x", x_dims, layout=layout), g.tensor("dy", y.dims, layout=layout)
    g.conv_wgrad(x, dy, dims=dw_dims, name="wgrad", **conv).set_output(True).set_name("dw")
    return g


def test_a_deep_reduction_is_split_into_equal_aligned_slices() -> None:
    g = wgrad_graph((64, 64, 56, 56), (64, 64, 3, 3))
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    npq = 64 * 56 * 56
    assert view.splits > 1 and npq % view.splits == 0 and (npq // view.splits) % 8 == 0
    p = view.problem
    assert (p.m, p.n, p.k, p.batch) == (64, 576, npq // view.splits, view.splits)
    assert (view.spec.a_major, view.spec.b_major, view.spec.c_dtype) == ("m", "n", "float32")
    assert view.workspace_bytes == npq * 576 * 2 + view.splits * 64 * 576 * 4  # im2col, then the partials


def test_a_shallow_reduction_writes_dw_directly() -> None:
    g = wgrad_graph()
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    assert view.splits == 1 and view.spec.c_dtype == "bfloat16" and view.problem.k == 2 * 9 * 11


def test_a_pointwise_unit_stride_wgrad_reads_x_in_place() -> None:
    g = wgrad_graph((2, 32, 7, 5), (40, 32, 1, 1), padding=(0, 0))
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    assert view.im2col is None and view.workspace_bytes == 0


@pytest.mark.parametrize(
    ("npq", "tiles", "want"),
    [(200704, 3, 64), (200704, 5, 49), (4096, 2, 8), (1000, 1, 1), (3136, 72, 4), (24 * 1024, 1000, 1)],
)
def test_split_count(npq: int, tiles: int, want: int) -> None:
    assert split_count(npq, tiles, 132) == want


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"layout": "NCHW"}, "channels-last"),
        ({"x_dims": (2, 16, 9, 11), "dw_dims": (24, 8, 3, 3)}, "grouped"),
        ({"dw_dims": (20, 16, 3, 3)}, "multiples of 8"),
        ({"dtype": "float32"}, "dtypes"),
    ],
)
def test_what_the_builder_declines(kw: dict, match: str) -> None:
    if "dw_dims" in kw and kw["dw_dims"][1] != (kw.get("x_dims") or (2, 16))[1]:
        g = sigdnn.Graph("wgrad", io_dtype="bfloat16", compute_dtype="float32")
        x = g.tensor("x", kw["x_dims"], layout="NHWC")
        dy = g.tensor("dy", (2, 24, 9, 11), layout="NHWC")
        g.conv_wgrad(x, dy, dims=kw["dw_dims"], padding=(1, 1), name="wgrad").set_output(True)
    else:
        g = wgrad_graph(**kw)
    with pytest.raises(NotSupported, match=match):
        CuteConvWgradBuilder().check(g.node_by_name("wgrad"), g, None)


def test_the_implicit_wgrad_splits_the_pixels_and_reads_dy_m_major() -> None:
    g = wgrad_graph((64, 64, 56, 56), (64, 64, 3, 3))
    view = plan_wgrad_implicit(g.node_by_name("wgrad"), g, 132)
    npq = 64 * 56 * 56
    assert view.shape == WgradShape(64, 576, npq, 2 * 64 * 64 * 56 * 56 * 2)
    assert view.config == ranked_configs(view.shape, 132)[0]
    assert view.splits == best_splits(view.shape, view.config, 132) > 1
    # Whole 64-pixel K steps a slice; the slices cover N*P*Q, the last one without running empty.
    assert view.chunk % 64 == 0 and view.chunk * (view.splits - 1) < npq <= view.chunk * view.splits
    assert (view.spec.a_major, view.spec.b_major, view.spec.c_dtype) == ("m", "n", "float32")
    assert view.geometry == (64, 56, 56, 64, 64, 3, 3, 56, 56, 1, 1, 1, 1, 1, 1, 1, 1)
    assert view.workspace_bytes == view.splits * 64 * 576 * 4


def test_the_implicit_wgrad_declines_channels_off_its_tile() -> None:
    g = wgrad_graph()  # 16 input channels
    with pytest.raises(NotSupported, match="multiple of 64"):
        CuteConvWgradImplicitBuilder().check(g.node_by_name("wgrad"), g, None)


def test_wide_n_tiles_are_whole_sub_tiles_that_never_straddle_dw() -> None:
    labels = [c.label for c in wgrad_tile_configs(64, 576)]  # 9 channel-block taps, K 64
    assert labels == ["pp64x64c1x1s1", "pp64x192c1x1s1"]
    labels = [c.label for c in wgrad_tile_configs(256, 1024)]  # 16 blocks: every width; 256 rows within 208 regs
    assert "coop256x256c1x1s1" not in labels
    assert {"pp64x256c1x1s1", "coop128x256c1x1s1", "coop256x128c1x1s1", "coop256x64c1x1s1"} <= set(labels)
    assert all(1024 // 64 % (c.tile_n // 64) == 0 for c in wgrad_tile_configs(256, 1024))
    assert all(c.tile_m < 256 for c in wgrad_tile_configs(128, 1152))  # 256 rows: half past K = 128


def test_split_choices_cover_the_pixels_in_whole_k_steps() -> None:
    assert split_choices(4096) == [1, 2, 3, 4, 5, 6, 7, 8]  # 64 K steps: slices of 8 steps (512 pixels) or more
    assert split_choices(1536) == [1, 2, 3]
    assert split_choices(1036) == [1, 2]  # 17 K steps, the last one partial: 9 + 8
    # 2346 pixels = 37 K steps (the last partial): 19 + 18, 13 + 13 + 11, 10 + 10 + 10 + 7, 8 + 8 + 8 + 8 + 5.
    assert split_choices(2346) == [1, 2, 3, 4, 5]
    assert [slice_steps(2346, d) for d in (1, 2, 3, 4, 5)] == [37, 19, 13, 10, 8]


@pytest.mark.parametrize("npq", [200704, 50176, 3136, 2346, 1036, 777])
def test_split_choices_are_exactly_the_slicings_without_an_empty_or_short_slice(npq: int) -> None:
    """Brute force: S slices of ceil(T / S) steps (T = npq / 64 rounded up), each covering its pixels in turn."""
    steps = -(-npq // 64)
    choices = set(split_choices(npq))
    for d in range(1, npq // 64 + 2):
        per = slice_steps(npq, d)
        lengths = [min(per, steps - i * per) for i in range(d)]  # K steps of each slice in turn
        assert sum(max(n, 0) for n in lengths) == steps
        allowed = d == 1 or (min(lengths) > 0 and per * 64 >= 512)
        assert (d in choices) == allowed, d


def test_the_model_splits_few_tiles_and_keeps_many_whole() -> None:
    few, many = parse_config("pp64x192c1x1s1"), parse_config("coop128x192c1x1s1")
    assert 120 <= 3 * best_splits(WgradShape(64, 576, 200704), few, 132) <= 132  # 3 tiles: slices fill the SMs
    assert best_splits(WgradShape(512, 4608, 3136), many, 132) <= 2  # 96 tiles already
    # 36 tiles: 2 slices fill one wave; 4 need a second, each SM then running two half-deep tiles.
    c = parse_config("coop128x128c1x1s1")
    shape = WgradShape(256, 2304, 12544)
    assert modelled_us(shape, c, 2, 132) < modelled_us(shape, c, 4, 132)
    # No tiling streams x and dy from HBM faster than once, and fewer SMs draw less of it.
    tiles = parse_config("pp64x64c1x1s1")
    assert modelled_us(WgradShape(64, 256, 200704, 10**9), tiles, 1, 132) > 1e9 / 3.8e12 * 1e6
    streamed = WgradShape(64, 256, 200704, 10**9)
    assert modelled_us(streamed, tiles, 8, 132) - modelled_us(streamed, tiles, 32, 132) > 1e9 / 3.8e12 * 1e6 * 0.1


def test_the_implicit_wgrad_offers_its_default_then_alternatives() -> None:
    g = wgrad_graph((64, 128, 28, 28), (128, 128, 3, 3))
    node = g.node_by_name("wgrad")
    labels = CuteConvWgradImplicitBuilder().configs([node], g, None)
    assert labels[0] == plan_wgrad_implicit(node, g, 132).config.label
    assert len(labels) == 1 + ALTERNATIVES == len(set(labels)) == 4  # the default, then three alternatives
    for label in labels:
        assert plan_wgrad_implicit(node, g, 132, parse_config(label)).config.label == label


@pytest.mark.parametrize(
    ("kw", "match"),
    [({"layout": "NCHW"}, "channels-last"), ({"stride": (9, 9), "padding": (0, 0)}, "strides up to 8")],
)
def test_the_implicit_wgrad_declines_what_its_loads_cannot_express(kw: dict, match: str) -> None:
    g = wgrad_graph((2, 64, 40, 40), (64, 64, 3, 3), **kw)
    with pytest.raises(NotSupported, match=match):
        plan_wgrad_implicit(g.node_by_name("wgrad"), g, 132)


def test_the_implicit_wgrad_declines_tiles_and_slices_it_cannot_run() -> None:
    g = wgrad_graph((64, 64, 56, 56), (64, 64, 3, 3))
    node = g.node_by_name("wgrad")
    with pytest.raises(NotSupported, match="tile config coop128x128"):
        plan_wgrad_implicit(node, g, 132, parse_config("coop128x128c1x1s1"))  # 9 blocks: no 128-wide tiles
    with pytest.raises(NotSupported, match="300 slices"):
        plan_wgrad_implicit(node, g, 132, None, 300)  # 11 K steps each cover N*P*Q in 286 slices


@pytest.mark.parametrize(
    ("shape", "label", "splits", "want"),
    [
        # One wave of 126 tiles, 28 K steps each bound by wgmma (2*256*128*64 / 6.6e12 s = 0.63550 us; the L2
        # feeding 126 tiles of 384 rows: 126 * 384 * 128 B / 13 TB/s = 0.47640 us), then the float32 tile's
        # store (131072 B / 64 GB/s = 2.048 us): 19.842 us; the reduction: 4 us + 30 * 589824 B / 3.45 TB/s.
        (WgradShape(256, 2304, 12544), "coop256x128c1x1s1", 7, 28.970921317523057),
        # 224 steps bound by the L2 (126 tiles of 128 rows: 0.15880 us; pingpong wgmma 0.10486 us), 0.256 us
        # store; 4 us + 58 * 147456 B / 3.45 TB/s of reduction.
        (WgradShape(64, 576, 200704), "pp64x64c1x1s1", 14, 40.44666691638796),
        # 144 tiles: a wave of 132 (49 steps of 0.41590 us, L2-bound) and one of 12 (49 steps bound by wgmma,
        # 0.31775 us), 1.024 us store each; one slice: no reduction.
        (WgradShape(512, 4608, 3136), "coop256x64c1x1s1", 1, 37.99694023310023),
        # Streaming 128 MB from HBM into 128 SMs (3.8 TB/s * (1 - e^(-128/24)) = 3.7817 TB/s: 33.848 us) outlasts
        # the tiles (16.07 us); then 4 us + 130 * 16384 B / 3.45 TB/s of reduction.
        (WgradShape(64, 256, 200704, 128 * 10**6), "pp64x64c1x1s1", 32, 38.464993283979055),
        # Uneven slices: 43 of 73 K steps (the last one 70), 129 tiles bound by the L2 (0.32516 us; wgmma
        # 0.31457 us).
        (WgradShape(64, 576, 200704), "pp64x192c1x1s1", 43, 30.363862903010038),
        # 28 slices of 112 steps on 84 SMs: the one warpgroup's wgmma binds (2*64*192*64 / 5e12 s = 0.31457 us;
        # the L2: 0.21173 us), then a 0.768 us store; 4 us + 114 * 147456 B / 3.45 TB/s of reduction.
        (WgradShape(64, 576, 200704), "pp64x192c1x1s1", 28, 41.21826838260869),
    ],
)
def test_the_model_by_hand(shape: WgradShape, label: str, splits: int, want: float) -> None:
    assert modelled_us(shape, parse_config(label), splits, 132) == pytest.approx(want, rel=1e-15)


def test_shallow_k_still_gets_a_tile_and_one_slice_writes_dw() -> None:
    assert [c.label for c in wgrad_tile_configs(16, 64)] == ["pp64x64c1x1s1"]
    g = wgrad_graph((2, 64, 9, 11), (16, 64, 3, 3))
    view = plan_wgrad_implicit(g.node_by_name("wgrad"), g, 132)
    assert view.splits == 1 and view.chunk == 256 and view.workspace_bytes == 0  # 198 pixels: 4 K steps
    assert view.spec == GemmSpec("bfloat16", "bfloat16", "bfloat16", "m", "n", "n", True, True)


def test_a_split_view_has_whole_aligned_slices() -> None:
    g = wgrad_graph((64, 64, 56, 56), (64, 64, 3, 3))
    view = plan_wgrad_implicit(g.node_by_name("wgrad"), g, 132, None, 28)
    assert isinstance(view.chunk, int) and view.chunk == 7168
    assert view.spec == GemmSpec("bfloat16", "bfloat16", "float32", "m", "n", "n", True, True)


def test_tensors_of_2_31_elements_are_declined_and_just_below_taken() -> None:
    big = wgrad_graph((2048, 64, 128, 128), (64, 64, 1, 1), padding=(0, 0))  # x of exactly 2^31 elements
    with pytest.raises(NotSupported, match="past 2"):
        plan_wgrad(big.node_by_name("wgrad"), big, 132)
    below = wgrad_graph((2047, 64, 128, 128), (64, 64, 1, 1), padding=(0, 0))
    assert plan_wgrad(below.node_by_name("wgrad"), below, 132).splits >= 1


def test_an_im2col_matrix_past_2_31_elements_is_declined_though_every_tensor_fits() -> None:
    g = wgrad_graph((256, 512, 56, 56), (512, 512, 3, 3))  # x and dy 411M elements, im2col 802816 x 4608 = 3.7G
    with pytest.raises(NotSupported, match="im2col matrix past 2"):
        plan_wgrad(g.node_by_name("wgrad"), g, 132)


def test_the_implicit_plan_assumes_the_h200s_132_sms_unless_told() -> None:
    g = wgrad_graph((256, 64, 56, 56), (64, 64, 1, 1), padding=(0, 0))  # one 64 x 64 tile a slice
    node = g.node_by_name("wgrad")
    assert plan_wgrad_implicit(node, g) == plan_wgrad_implicit(node, g, 132)
    assert plan_wgrad_implicit(node, g, 132).splits == 131 != plan_wgrad_implicit(node, g, 133).splits


def mixed_graph(x_dtype: str, dy_dtype: str, dw_dtype: str) -> sigdnn.Graph:
    g = sigdnn.Graph("wgrad", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", (2, 16, 9, 11), layout="NHWC", dtype=x_dtype)
    dy = g.tensor("dy", (2, 24, 9, 11), layout="NHWC", dtype=dy_dtype)
    g.conv_wgrad(x, dy, dims=(24, 16, 3, 3), padding=(1, 1), name="wgrad").set_output(True).set_data_type(dw_dtype)
    return g


@pytest.mark.parametrize(
    "dtypes",
    [("bfloat16", "float16", "bfloat16"), ("float32", "float32", "float32"), ("bfloat16", "bfloat16", "int32")],
)
def test_dtypes_off_the_kernels_are_declined(dtypes: tuple[str, str, str]) -> None:
    g = mixed_graph(*dtypes)
    with pytest.raises(NotSupported, match="dtypes x"):
        plan_wgrad(g.node_by_name("wgrad"), g, 132)
    g = mixed_graph("float16", "float16", "float32")  # both inputs 16-bit and alike, dw wider: taken
    assert plan_wgrad(g.node_by_name("wgrad"), g, 132).out_dtype == "float32"


def test_the_im2col_gemm_by_hand() -> None:
    """conv2_3x3 (64 x 576 out of 200704 pixels): 5 tiles of 128x128, so 2 * 132 / 5 -> 53 slices wanted, 49
    the largest divisor of 200704 = 2^12 * 7^2 at most 53 with slices of 8k pixels: 4096 each."""
    g = wgrad_graph((64, 64, 56, 56), (64, 64, 3, 3))
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    assert view.splits == 49
    assert view.problem == GemmProblem(64, 576, 4096, 49, 64, 576, 576, 4096 * 64, 4096 * 576, 64 * 576)


def test_split_count_takes_two_slices_when_two_fill_the_waves() -> None:
    assert split_count(1536, 132, 132) == 2  # 132 tiles: two slices for two waves
    assert split_count(1536, 133, 132) == 2
    assert split_count(1536, 264, 132) == 1


def test_workspace_holds_the_im2col_matrix_rounded_to_256_bytes_then_the_partials() -> None:
    g = wgrad_graph()  # 198 x 144 bf16: 57024 bytes, 57088 rounded
    assert plan_wgrad(g.node_by_name("wgrad"), g, 132).workspace_bytes == 57088
    g = wgrad_graph((4, 8, 32, 32), (16, 8, 3, 3))  # one tile, one SM: two slices of the 4096 pixels
    view = plan_wgrad(g.node_by_name("wgrad"), g, 1)
    assert view.splits == 2 and view.workspace_bytes == 4096 * 72 * 2 + 2 * 16 * 72 * 4
    implicit = wgrad_graph((4, 64, 32, 32), (16, 64, 3, 3))
    view = plan_wgrad_implicit(implicit.node_by_name("wgrad"), implicit, 132, None, 2)
    assert view.workspace_bytes == 2 * 16 * 576 * 4


def test_the_im2col_plan_assumes_the_h200s_132_sms_unless_told() -> None:
    g = wgrad_graph((133, 64, 32, 32), (64, 64, 1, 1), padding=(0, 0))  # one tile; 136192 = 2^10 * 7 * 19 pixels
    node = g.node_by_name("wgrad")
    assert plan_wgrad(node, g).splits == plan_wgrad(node, g, 132).splits == 224
    assert plan_wgrad(node, g, 133).splits == 266


def test_the_builders_register_as_cute_gpu_conv_wgrad_builders() -> None:
    for builder in (CuteConvWgradBuilder, CuteConvWgradImplicitBuilder, CuteConvWgradRowsBuilder):
        assert (builder.library, builder.device, builder.ops) == ("cute", "gpu", ("conv_wgrad",))
    assert CuteConvWgradImplicitBuilder.priority > CuteConvWgradBuilder.priority  # no im2col pass: first
    assert CuteConvWgradRowsBuilder.priority > CuteConvWgradImplicitBuilder.priority  # a third of the L2 traffic
    assert CuteConvWgradRowsBuilder.engine_id == 3006


def test_the_row_wgrad_fills_one_wave_with_row_slices_by_hand() -> None:
    g = wgrad_graph((64, 64, 56, 56), (64, 64, 3, 3))  # ResNet-50 conv2_3x3: 3584 rows, 3 tiles a slice
    view = plan_wgrad_rows(g.node_by_name("wgrad"), g, 132)
    assert (view.kind, view.config.label, view.splits, view.chunk) == ("wgrad_rows", "pp64x192c1x1s1", 44, 82 * 64)
    assert view.spec.c_dtype == "float32" and view.out_dtype == "bfloat16"
    assert view.workspace_bytes == 44 * 64 * 576 * 4
    assert plan_wgrad_rows(g.node_by_name("wgrad"), g, 66).splits == 22  # the SMs, not a constant
    one = plan_wgrad_rows(g.node_by_name("wgrad"), g, 132, 1)
    assert (one.splits, one.chunk, one.spec.c_dtype, one.workspace_bytes) == (1, 3584 * 64, "bfloat16", 0)


def test_the_row_wgrad_slices_never_leave_one_empty() -> None:
    assert row_slices(7) == [1, 2, 3, 4, 7]  # 5 slices of 2 rows cover 7 in 4; 6 likewise
    assert row_slices(1) == [1]
    for rows in (112, 3584, 37):
        for d in row_slices(rows):
            per = -(-rows // d)
            assert (d - 1) * per < rows <= d * per
    g = wgrad_graph((2, 64, 56, 56), (64, 64, 3, 3))  # 112 rows: 38 slices of 3 (44 would leave one empty)
    assert plan_wgrad_rows(g.node_by_name("wgrad"), g, 132).splits == 38
    with pytest.raises(NotSupported, match="5 slices of 7 rows"):
        g = wgrad_graph((1, 64, 7, 9), (64, 64, 3, 3))
        plan_wgrad_rows(g.node_by_name("wgrad"), g, 132, 5)


def test_k_off_the_tile_takes_fewer_slices_for_its_m_tiles() -> None:
    g = wgrad_graph((64, 64, 56, 56), (136, 64, 3, 3))  # 3 M tiles x 3 filter rows: 9 tiles a slice
    assert plan_wgrad_rows(g.node_by_name("wgrad"), g, 132).splits == 14


@pytest.mark.parametrize(
    ("x_dims", "dw_dims", "conv", "match"),
    [
        ((2, 128, 8, 8), (64, 128, 3, 3), {}, "128 input channels, a 3x3 filter; the row wgrad takes 64 channels"),
        ((2, 64, 8, 8), (64, 64, 1, 1), {"padding": (0, 0)}, "a 1x1 filter"),
        ((2, 64, 8, 8), (64, 64, 3, 3), {"stride": (2, 2)}, "unit stride"),
        ((2, 64, 8, 8), (64, 64, 3, 3), {"dilation": (1, 2)}, "unit stride and dilation"),
        (
            (2, 64, 8, 8),
            (64, 64, 3, 3),
            {"padding": None, "pre_padding": (1, 1), "post_padding": (1, 0)},
            "'wgrad': padding, stride or",
        ),
        ((2, 64, 8, 65), (64, 64, 3, 3), {}, "65 output columns"),
    ],
)
def test_the_row_wgrad_declines_what_one_row_a_step_cannot_hold(x_dims, dw_dims, conv, match) -> None:
    g = wgrad_graph(x_dims, dw_dims, **conv)
    with pytest.raises(NotSupported, match=match):
        plan_wgrad_rows(g.node_by_name("wgrad"), g, 132)


def test_the_implicit_builder_builds_autotunes_choice_else_the_models() -> None:
    g = wgrad_graph((2, 64, 56, 56), (64, 64, 3, 3))
    node = g.node_by_name("wgrad")
    builder = CuteConvWgradImplicitBuilder()
    assert builder.view(node, g, 132, None, "w") == plan_wgrad_implicit(node, g, 132)
    chosen = builder.view(node, g, 132, "pp64x64c1x1s1", "w")
    assert chosen == plan_wgrad_implicit(node, g, 132, parse_config("pp64x64c1x1s1"))
    assert chosen.config.label == "pp64x64c1x1s1" and chosen.kind == "wgrad"


def test_the_implicit_builder_takes_the_environments_config_without_a_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", "pp64x192c1x1s1")
    g = wgrad_graph((2, 64, 56, 56), (64, 64, 3, 3))
    view = CuteConvWgradImplicitBuilder().view(g.node_by_name("wgrad"), g, 132, None, "w")
    assert view.config.label == "pp64x192c1x1s1"
    assert plan_wgrad_implicit(g.node_by_name("wgrad"), g, 132).config.label != "pp64x192c1x1s1"  # not the model's


def test_the_row_builder_builds_the_row_plan() -> None:
    g = wgrad_graph((2, 64, 56, 56), (64, 64, 3, 3))
    node = g.node_by_name("wgrad")
    assert CuteConvWgradRowsBuilder().view(node, g, 132, None, "w") == plan_wgrad_rows(node, g, 132)


def test_the_row_builder_declines_what_its_plan_declines() -> None:
    g = wgrad_graph((2, 64, 8, 8), (64, 64, 1, 1), padding=(0, 0))
    with pytest.raises(NotSupported, match="a 1x1 filter"):
        CuteConvWgradRowsBuilder().check(g.node_by_name("wgrad"), g, None)


def test_the_row_wgrad_takes_64_columns_and_one() -> None:
    for width in (64, 1):
        g = wgrad_graph((1, 64, 3, width), (8, 64, 3, 3))
        assert plan_wgrad_rows(g.node_by_name("wgrad"), g, 132).splits == 3  # 3 rows, one a slice
    assert rows_reason((1, 3, 64, 64, 8, 3, 3, 3, 64, 1, 1, 1, 1, 1, 1, 1, 1)) is None


def test_channels_off_8_pad_the_rows_and_copy_dw_out() -> None:
    """The ResNet-50 stem's wgrad at batch 2: A's and dw's rows of 7*7*3 = 147 padded to 152."""
    g = sigdnn.Graph("wgrad", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", (2, 3, 32, 30), layout="NHWC")
    dy = g.tensor("dy", (2, 64, 16, 15), layout="NHWC")
    g.conv_wgrad(x, dy, dims=(64, 3, 7, 7), padding=(3, 3), stride=(2, 2), name="wgrad").set_output(True)
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    npq = 2 * 16 * 15
    assert view.im2col == (2, 32, 30, 3, 16, 15, 7, 7, 3, 3, 2, 2, 1, 1, 152)
    assert (view.rsc, view.unpadded, view.npq, view.k) == (152, 147, npq, 64)
    assert view.unpad_extents == (64, 1, 1, 152, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, 147)
    assert view.problem.n == 152
    padded_dw = 64 * 152 * 2
    assert view.workspace_bytes == view.im2col_bytes + view.parts_bytes + padded_dw
    assert view.im2col_bytes >= npq * 152 * 2 and view.im2col_bytes % 256 == 0


def test_the_stem_wgrad_at_batch_64_runs_in_waves_within_the_im2col_budget() -> None:
    """238 MiB of im2col matrix: 8 waves of 8 images, each wave's GEMM over its splits // 8 slices."""
    g = wgrad_graph((64, 3, 224, 224), (64, 3, 7, 7), padding=(3, 3), stride=(2, 2))
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    npq, rsc = 64 * 112 * 112, 152
    assert view.waves == 8 and view.splits % 8 == 0 and view.im2col[0] == 8
    assert view.problem.batch == view.splits // 8 and view.problem.k == npq // view.splits
    assert view.im2col_bytes == npq // 8 * rsc * 2 <= 32 << 20
    assert view.wave_bytes == (8 * 3 * 224 * 224 * 2, npq // 8 * 64 * 2)
    assert view.wave_parts_bytes == view.splits // 8 * 64 * rsc * 4 and view.parts_bytes >= 8 * view.wave_parts_bytes
    ints = (*view.im2col, *view.wave_bytes, view.im2col_bytes, view.wave_parts_bytes, view.problem.batch)
    assert all(type(v) is int for v in ints), view  # kernel arguments and pointer offsets


def test_waves_step_dy_by_its_own_itemsize_whatever_dw_is() -> None:
    g = wgrad_graph((64, 3, 224, 224), (64, 3, 7, 7), padding=(3, 3), stride=(2, 2))
    g.tensor_by_name("dw").set_data_type("float32")
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    assert view.waves == 8 and view.wave_bytes == (8 * 3 * 224 * 224 * 2, 64 * 112 * 112 // 8 * 64 * 2)


def test_a_wgrad_reading_x_in_place_never_runs_in_waves() -> None:
    """No im2col matrix to bound (a 1x1 unit-stride conv reads x itself), however large x is."""
    g = wgrad_graph((256, 64, 56, 56), (64, 64, 1, 1), padding=(0, 0))
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    assert view.im2col is None and view.splits > 1 and view.waves == 1


def test_a_wgrad_writing_dw_directly_never_runs_in_waves() -> None:
    """Waves add partial sums; one slice has none, so its matrix stays whole however large."""
    g = wgrad_graph((64, 3, 224, 224), (64, 3, 7, 7), padding=(3, 3), stride=(2, 2))
    view = plan_wgrad(g.node_by_name("wgrad"), g, 1)
    assert view.splits == 1 and view.waves == 1 and view.im2col[0] == 64


def test_two_splits_make_at_most_two_waves() -> None:
    """A deep 3x3 layer over many tiles takes 2 splits; its 925 MB im2col matrix runs in 2 waves (the splits
    bound the waves: each wave owns whole slices)."""
    g = wgrad_graph((64, 256, 56, 56), (1024, 256, 3, 3))
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    assert (view.splits, view.waves, view.im2col[0]) == (2, 2, 32)
