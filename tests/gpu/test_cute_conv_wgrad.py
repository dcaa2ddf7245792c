"""The CuTe conv wgrad (im2col + split-K Hopper GEMM + reduction) on a GPU, judged by sigdnn.validate.

Padding (asymmetric too), stride 2, dilation, a 1x1 read in place, channel
counts off the tiles, deep reductions split into slices (float32 partials
added by the reduction kernel) and shallow ones written straight into dw,
16- and 32-bit dw. Skips without a GPU, nvidia-cutlass-dsl or sm_90.
"""

from __future__ import annotations

import pytest
from cute_skip import skip_unless_sm90

import sigdnn
from sigdnn.plan_builders.cute import conv_wgrad
from sigdnn.plan_builders.cute.conv_wgrad import plan_wgrad_implicit
from sigdnn.plan_builders.cute.matmul import parse_config

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe conv wgrad")

ENGINE = "cute.conv_wgrad"
IMPLICIT = "cute.conv_wgrad_implicit"
CASES = {
    # name: (x dims, dw dims, io dtype, dw dtype, conv arguments)
    "3x3_pad1_shallow": ((2, 16, 9, 11), (24, 16, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "3x3_split_k": ((4, 16, 32, 32), (16, 16, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "strided_dilated_asymmetric_f32": (
        (3, 8, 13, 10),
        (16, 8, 3, 3),
        "float16",
        "float32",
        {"pre_padding": (1, 2), "post_padding": (0, 1), "stride": (2, 1), "dilation": (2, 2)},
    ),
    "pointwise_in_place_split": ((8, 32, 16, 16), (40, 32, 1, 1), "float16", "float16", {}),
    "stride2_tails": ((2, 72, 31, 29), (136, 72, 3, 3), "bfloat16", "float32", {"padding": (1, 1), "stride": (2, 2)}),
    # C not a multiple of 8: rows padded, dw copied out of its padded copy
    "stem_7x7_3_channels": (
        (4, 3, 40, 36),
        (64, 3, 7, 7),
        "bfloat16",
        "bfloat16",
        {"padding": (3, 3), "stride": (2, 2)},
    ),
    "12_channels_split_f32": ((8, 12, 32, 32), (16, 12, 3, 3), "float16", "float32", {"padding": (1, 1)}),
}

# The implicit wgrad (B through the TMA's im2col mode) takes C in multiples of 64.
IMPLICIT_CASES = {
    "3x3_pad1_split": ((4, 64, 16, 16), (32, 64, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "3x3_unsplit_f32": ((1, 64, 9, 11), (136, 64, 3, 3), "float16", "float32", {"padding": (1, 1)}),
    "strided_dilated_asymmetric": (
        (3, 128, 13, 10),
        (72, 128, 3, 3),
        "bfloat16",
        "float32",
        {"pre_padding": (1, 2), "post_padding": (0, 1), "stride": (2, 1), "dilation": (2, 2)},
    ),
    "pointwise_split": ((8, 64, 16, 16), (40, 64, 1, 1), "float16", "float16", {}),
    "5x3_stride2_tails": (
        (2, 192, 21, 19),
        (200, 192, 5, 3),
        "bfloat16",
        "bfloat16",
        {"padding": (2, 1), "stride": (2, 2)},
    ),
}


# Wide N tiles (t 64-column sub-tiles, each its own TMA load of one channel block of one tap) and the
# other M tiles, forced per case: K off the M tile, N*P*Q off the 64-deep K step, odd spatial sizes.
CONFIG_CASES = {
    # name: (case as above, tile configs)
    "3x3_c128_k72": (
        ((16, 128, 15, 13), (72, 128, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),  # 3120 pixels: split
        ("pp64x128c1x1s1", "pp64x192c1x1s1", "coop128x128c1x1s1", "coop128x192c1x1s1"),
    ),
    "2x2_dilated_asymmetric_k136": (
        (
            (2, 64, 17, 15),
            (136, 64, 2, 2),
            "bfloat16",
            "float32",
            {"pre_padding": (1, 0), "post_padding": (0, 1), "stride": (2, 1), "dilation": (2, 1)},
        ),
        ("pp64x256c1x1s1", "coop128x256c1x1s1", "coop256x128c1x1s1"),
    ),
    "1x1_c256_k64_split": (
        ((16, 256, 10, 20), (64, 256, 1, 1), "float16", "float16", {}),  # 3200 pixels: 7 slices, uneven
        ("pp64x256c1x1s1", "pp64x128c1x1s1"),
    ),
}


# Slices that do not divide N*P*Q (2346 pixels: 37 K steps, the last one partial): the last slice runs past the
# pixels (zeros through the TMA), K off the M tile. name: (case, tile config, slice count).
_UNEVEN = ((6, 64, 23, 17), (48, 64, 3, 3), "bfloat16", "float32", {"padding": (1, 1)})
UNEVEN_CASES = {
    "pp64x192_3_slices": (_UNEVEN, "pp64x192c1x1s1", 3),  # 13 + 13 + 11 steps, 2 past the end
    "pp64x64_5_slices": (_UNEVEN, "pp64x64c1x1s1", 5),  # 8 + 8 + 8 + 8 + 5, 3 past the end
    "coop128x128_2_slices_k136": (
        ((3, 128, 29, 27), (136, 128, 3, 3), "float16", "float16", {"padding": (1, 1), "stride": (1, 1)}),
        "coop128x128c1x1s1",
        2,  # 2349 pixels: 19 + 18 steps
    ),
}

# The row wgrad (3x3, 64 channels, padding 1, unit stride; x read a row at a time, the taps from shared memory).
ROWS = "cute.conv_wgrad_rows"
ROWS_CASES = {
    # 112 rows in 38 slices of 3 (the last one row, two past the end), ResNet-50 conv2's width
    "resnet_width_split": ((2, 64, 56, 56), (64, 64, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    # K off the 64-row M tile (three M tiles), an odd width, float32 dw
    "k136_odd_width_f32": ((3, 64, 13, 37), (136, 64, 3, 3), "float16", "float32", {"padding": (1, 1)}),
    "full_width_64": ((1, 64, 7, 64), (72, 64, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "one_column": ((2, 64, 5, 1), (16, 64, 3, 3), "bfloat16", "float32", {"padding": (1, 1)}),
}
ROWS_SLICES = (1, 2, 7)  # slice counts forced on resnet_width_split (1: dw written directly, no reduction)


def wgrad_graph(x_dims, dw_dims, dtype: str, out: str, conv: dict) -> sigdnn.Graph:
    g = sigdnn.Graph("wgrad", io_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", x_dims, layout="NHWC")
    probe = sigdnn.Graph("probe", io_dtype=dtype, compute_dtype="float32")
    y = probe.conv_fprop(probe.tensor("x", x_dims, layout="NHWC"), probe.tensor("w", dw_dims, layout="NHWC"), **conv)
    dy = g.tensor("dy", y.dims, layout="NHWC")
    g.conv_wgrad(x, dy, dims=dw_dims, name="wgrad", **conv).set_output(True).set_name("dw").set_data_type(out)
    return g


@pytest.mark.parametrize("name", list(CASES))
def test_conv_wgrad_validates_against_the_reference(name: str) -> None:
    g = wgrad_graph(*CASES[name])
    report = sigdnn.validate(g, seed=29, executor=sigdnn.Executor("gpu", engine=ENGINE))
    print(report.table())
    assert report.builders == {"wgrad": ENGINE}
    assert report.passed, report.table()


@pytest.mark.parametrize("name", list(IMPLICIT_CASES))
def test_implicit_conv_wgrad_validates_against_the_reference(name: str) -> None:
    g = wgrad_graph(*IMPLICIT_CASES[name])
    report = sigdnn.validate(g, seed=31, executor=sigdnn.Executor("gpu", engine=IMPLICIT))
    print(report.table())
    assert report.builders == {"wgrad": IMPLICIT}
    assert report.passed, report.table()


@pytest.mark.parametrize(
    ("name", "config"), [(name, config) for name, (_, configs) in CONFIG_CASES.items() for config in configs]
)
def test_every_implicit_tile_config_validates(name: str, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    g = wgrad_graph(*CONFIG_CASES[name][0])
    plan = sigdnn.Executor("gpu", engine=IMPLICIT).prepare(g)
    assert plan.steps[0].plan.config.label == config
    report = sigdnn.validate(g, seed=37, executor=sigdnn.Executor("gpu", engine=IMPLICIT))
    assert report.passed, report.table()


@pytest.mark.parametrize("name", ["3x3_c128_k72", "1x1_c256_k64_split"])
def test_the_split_reduction_is_exercised(name: str) -> None:
    g = wgrad_graph(*CONFIG_CASES[name][0])
    for config in CONFIG_CASES[name][1]:
        assert plan_wgrad_implicit(g.node_by_name("wgrad"), g, 132, parse_config(config)).splits > 1


@pytest.mark.parametrize("name", list(UNEVEN_CASES))
def test_uneven_slices_validate(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    case, config, splits = UNEVEN_CASES[name]
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", config)
    monkeypatch.setattr(conv_wgrad, "best_splits", lambda shape, tiles, sm_count: splits)
    g = wgrad_graph(*case)
    view = plan_wgrad_implicit(g.node_by_name("wgrad"), g, 132, parse_config(config))
    assert view.splits == splits and view.chunk * splits > view.shape.npq  # the last slice runs past the end
    report = sigdnn.validate(g, seed=41, executor=sigdnn.Executor("gpu", engine=IMPLICIT))
    assert report.builders == {"wgrad": IMPLICIT}
    assert report.passed, report.table()


def test_sub_tiles_loaded_in_the_wrong_order_fail_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: each wide N tile's 64-column sub-tiles loaded in reverse order (every load in range,
    every extent unchanged) must fail; compiled afresh, past both compile caches."""
    from sigdnn.plan_builders.cute.kernels import conv_launch, conv_wgrad_sm90
    from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache

    loads = conv_wgrad_sm90.HopperConvWgrad.copy_b

    def reversed_copy(self, tma_b, tBgB, tBsB, b_tile, k, counters, b_l, stage, barrier, mask):
        subs, *rest = b_tile  # each sub-tile's (channel, s, r), then the K step's pixel increments
        loads(self, tma_b, tBgB, tBsB, (subs[::-1], *rest), k, counters, b_l, stage, barrier, mask)

    monkeypatch.setattr(conv_wgrad_sm90.HopperConvWgrad, "copy_b", reversed_copy)
    monkeypatch.setattr(conv_launch, "_CACHE", CompileCache())
    monkeypatch.setenv("SIGDNN_CUTE_CACHE", "0")
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", "pp64x256c1x1s1")
    g = wgrad_graph(*CONFIG_CASES["2x2_dilated_asymmetric_k136"][0])
    report = sigdnn.validate(g, seed=37, executor=sigdnn.Executor("gpu", engine=IMPLICIT))
    assert report.builders == {"wgrad": IMPLICIT}
    assert not report.passed


@pytest.mark.parametrize("name", list(ROWS_CASES))
def test_row_wgrad_validates_against_the_reference(name: str) -> None:
    g = wgrad_graph(*ROWS_CASES[name])
    report = sigdnn.validate(g, seed=43, executor=sigdnn.Executor("gpu", engine=ROWS))
    print(report.table())
    assert report.builders == {"wgrad": ROWS}
    assert report.passed, report.table()


@pytest.mark.parametrize("splits", ROWS_SLICES)
def test_row_wgrad_slice_counts_validate(splits: int, monkeypatch: pytest.MonkeyPatch) -> None:
    plan = conv_wgrad.plan_wgrad_rows
    monkeypatch.setattr(
        conv_wgrad, "plan_wgrad_rows", lambda node, graph, sm_count=132: plan(node, graph, sm_count, splits)
    )
    g = wgrad_graph(*ROWS_CASES["resnet_width_split"])
    report = sigdnn.validate(g, seed=47, executor=sigdnn.Executor("gpu", engine=ROWS))
    assert report.builders == {"wgrad": ROWS}
    assert report.passed, report.table()


def test_row_wgrad_reading_the_wrong_row_fails_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: x's row one below the filter row's (every load in range or zero-filled) must fail;
    compiled afresh, past both compile caches."""
    from sigdnn.plan_builders.cute.kernels import conv_launch, conv_wgrad_rows_sm90
    from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache

    loads = conv_wgrad_rows_sm90.HopperConvWgradRows.copy_b

    def shifted_copy(self, tma_b, tBgB, tBsB, b_tile, k, counters, b_l, stage, barrier, mask):
        counters = (counters[0], counters[1] + 1, *counters[2:])
        loads(self, tma_b, tBgB, tBsB, b_tile, k, counters, b_l, stage, barrier, mask)

    monkeypatch.setattr(conv_wgrad_rows_sm90.HopperConvWgradRows, "copy_b", shifted_copy)
    monkeypatch.setattr(conv_launch, "_CACHE", CompileCache())
    monkeypatch.setenv("SIGDNN_CUTE_CACHE", "0")
    g = wgrad_graph(*ROWS_CASES["k136_odd_width_f32"])
    report = sigdnn.validate(g, seed=43, executor=sigdnn.Executor("gpu", engine=ROWS))
    assert report.builders == {"wgrad": ROWS}
    assert not report.passed


def test_waves_validate(monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget of one image's im2col rows: as many waves as the batch and the splits share, one reduction."""
    from sigdnn.plan_builders.cute import batch_slices
    from sigdnn.plan_builders.cute.conv_wgrad import plan_wgrad

    monkeypatch.setattr(batch_slices, "IM2COL_BUDGET", 1)
    g = wgrad_graph((4, 3, 40, 36), (64, 3, 7, 7), "bfloat16", "bfloat16", {"padding": (3, 3), "stride": (2, 2)})
    view = plan_wgrad(g.node_by_name("wgrad"), g, 132)
    assert view.waves > 1, view
    report = sigdnn.validate(g, seed=31, executor=sigdnn.Executor("gpu", engine=ENGINE))
    assert report.passed, report.table()
