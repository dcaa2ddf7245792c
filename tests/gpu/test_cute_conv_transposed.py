"""The CuTe transposed conv fprop (y^T = W x im2col(x)^T, K <= 64 output channels) on a GPU.

Judged by sigdnn.validate against the float64 reference: ResNet-50's conv2_3x3
and conv2_1x1_reduce shapes at batch 2, output channels below the 64-row M
tile, pixels off the 256-wide N tile, stride, dilation and asymmetric
padding, 16- and 32-bit outputs, and fused bias / activation epilogues as
one region (the bias by row). The row conv (four output rows a tile, each
filter row's taps as shifted views of one load of x's rows): ResNet-50's
conv2 width, widths off the 64-pixel slot (37, 1) and at its limit (62),
several tiles an image, output channels below the tile. Planted bugs (the
bias read by column, as the untransposed GEMM's; the row conv's taps
rotated) must fail validation. Skips without a GPU, nvidia-cutlass-dsl or
sm_90.
"""

from __future__ import annotations

import attrs
import pytest
from cute_skip import skip_unless_sm90
from test_cute_conv_implicit import conv_graph, fused_graph

import sigdnn
from sigdnn.plan_builders.cute import conv_transposed

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe transposed conv")

ENGINE = "cute.conv_fprop_transposed"
CASES = {
    # name: (x dims, w dims, io dtype, y dtype, conv arguments)
    "conv2_3x3": ((2, 64, 56, 56), (64, 64, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "conv2_1x1_reduce": ((2, 256, 14, 14), (64, 256, 1, 1), "bfloat16", "bfloat16", {}),
    "k40_f32": ((3, 72, 9, 37), (40, 72, 3, 3), "float16", "float32", {"padding": (1, 1)}),
    "strided_dilated_asymmetric_k8": (
        (3, 24, 13, 10),
        (8, 24, 3, 3),
        "bfloat16",
        "bfloat16",
        {"pre_padding": (1, 2), "post_padding": (0, 1), "stride": (2, 1), "dilation": (2, 2)},
    ),
}
FUSED = {
    # name: (x dims, w dims, io dtype, intermediate dtype, bias, activation)
    "bias_relu": ((2, 64, 14, 30), (64, 64, 3, 3), "bfloat16", "bfloat16", True, "relu_fwd"),
    "bias_gelu_f32_mid_k48": ((1, 32, 7, 50), (48, 32, 3, 3), "float16", None, True, "gelu_fwd"),
    "bias_only": ((2, 16, 9, 9), (32, 16, 3, 3), "bfloat16", None, True, None),
}


ROWS = "cute.conv_fprop_rows"
PAD1 = {"padding": (1, 1)}
ROWS_CASES = {
    "conv2_3x3": ((2, 64, 56, 56), (64, 64, 3, 3), "bfloat16", "bfloat16", PAD1),
    "k40_width37_f32": ((3, 64, 8, 37), (40, 64, 3, 3), "float16", "float32", PAD1),
    "width62": ((1, 64, 4, 62), (64, 64, 3, 3), "bfloat16", "bfloat16", PAD1),
    "width1_k8": ((2, 64, 12, 1), (8, 64, 3, 3), "bfloat16", "float32", PAD1),
}
ROWS_FUSED = {
    "bias_relu": ((2, 64, 12, 30), (64, 64, 3, 3), "bfloat16", "bfloat16", True, "relu_fwd"),
    "bias_gelu_f32_mid_k48": ((1, 64, 8, 50), (48, 64, 3, 3), "float16", None, True, "gelu_fwd"),
}


def validate(g: sigdnn.Graph, seed: int, engine: str = ENGINE) -> sigdnn.ValidationReport:
    report = sigdnn.validate(g, seed=seed, executor=sigdnn.Executor("gpu", engine=engine))
    print(report.table())
    return report


@pytest.mark.parametrize("name", list(CASES))
def test_transposed_conv_validates_against_the_reference(name: str) -> None:
    report = validate(conv_graph(*CASES[name]), 61)
    assert report.builders == {"conv": ENGINE}
    assert report.passed, report.table()


@pytest.mark.parametrize("name", list(FUSED))
def test_transposed_conv_fused_epilogue_validates(name: str) -> None:
    g = fused_graph(*FUSED[name])
    report = validate(g, 67)
    last = g.nodes[-1].name
    assert report.builders == {f"region(conv..{last})": ENGINE}
    assert report.passed, report.table()


@pytest.mark.parametrize("name", list(ROWS_CASES))
def test_row_conv_validates_against_the_reference(name: str) -> None:
    report = validate(conv_graph(*ROWS_CASES[name]), 71, ROWS)
    assert report.builders == {"conv": ROWS}
    assert report.passed, report.table()


@pytest.mark.parametrize("name", list(ROWS_FUSED))
def test_row_conv_fused_epilogue_validates(name: str) -> None:
    report = validate(fused_graph(*ROWS_FUSED[name]), 73, ROWS)
    assert report.builders == {"region(conv..act)": ROWS}
    assert report.passed, report.table()


def test_the_default_gpu_executor_ranks_rows_then_transposed_for_64_channels() -> None:
    plan = sigdnn.Executor("gpu").prepare(conv_graph(*CASES["conv2_3x3"]))
    assert plan.steps[0].builder.name == ROWS
    plan = sigdnn.Executor("gpu").prepare(conv_graph(*CASES["conv2_1x1_reduce"]))
    assert plan.steps[0].builder.name == ENGINE


def test_row_conv_taps_rotated_fail_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: each filter row's taps s multiplied by the x view of tap s + 1 (mod 3; every
    descriptor in the buffer) must fail; compiled afresh, past both compile caches."""
    from sigdnn.plan_builders.cute.kernels import conv_launch, conv_rows_sm90
    from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache

    issue = conv_rows_sm90.HopperConvFpropRows.mma

    def rotated(self, tiled_mma, acc, tCrA, tCrB, coord):
        issue(self, tiled_mma, acc, tCrA, (*tCrB[1:], tCrB[0]), coord)

    monkeypatch.setattr(conv_rows_sm90.HopperConvFpropRows, "mma", rotated)
    monkeypatch.setattr(conv_launch, "_CACHE", CompileCache())
    monkeypatch.setenv("SIGDNN_CUTE_CACHE", "0")
    report = validate(conv_graph(*ROWS_CASES["k40_width37_f32"]), 71, ROWS)
    assert report.builders == {"conv": ROWS}
    assert not report.passed


def test_a_bias_read_by_column_fails_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: the transposed GEMM's bias indexed as the plain GEMM's (by pixel, every index clamped
    in range) must fail."""
    real = conv_transposed.transposed_view
    monkeypatch.setattr(
        conv_transposed,
        "transposed_view",
        lambda view: attrs.evolve(real(view), spec=attrs.evolve(real(view).spec, bias_per="n")),
    )
    report = validate(fused_graph(*FUSED["bias_relu"]), 67)
    assert report.builders == {"region(conv..act)": ENGINE}
    assert not report.passed
