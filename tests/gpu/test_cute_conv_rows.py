"""The CuTe row conv fprop (3x3 on 64 channels, a tile per output row, the filter resident) on a GPU.

Judged by sigdnn.validate against the float64 reference: ResNet-50's conv2 width
(56), widths off the 64-pixel tile (37, 1) and on it (64), output channels
below the 64-wide N tile, 16- and 32-bit outputs, and the fused bias /
activation epilogues as one region. A planted bug (each filter row's taps
issued mirrored) must fail validation. Skips without a GPU,
nvidia-cutlass-dsl or sm_90.
"""

from __future__ import annotations

import pytest
from cute_skip import skip_unless_sm90
from test_cute_conv_implicit import conv_graph, fused_graph

import sigdnn

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe row conv")

ENGINE = "cute.conv_fprop_rows"
PAD1 = {"padding": (1, 1)}
CASES = {
    # name: (x dims, w dims, io dtype, y dtype, conv arguments)
    "resnet_width": ((2, 64, 56, 56), (64, 64, 3, 3), "bfloat16", "bfloat16", PAD1),
    "k40_odd_width_f32": ((3, 64, 9, 37), (40, 64, 3, 3), "float16", "float32", PAD1),
    "full_width_64": ((1, 64, 5, 64), (64, 64, 3, 3), "bfloat16", "bfloat16", PAD1),
    "one_column_k8": ((2, 64, 4, 1), (8, 64, 3, 3), "bfloat16", "float32", PAD1),
}
FUSED = {
    # name: (x dims, w dims, io dtype, intermediate dtype, bias, activation)
    "bias_relu": ((2, 64, 14, 30), (64, 64, 3, 3), "bfloat16", "bfloat16", True, "relu_fwd"),
    "bias_gelu_f32_mid": ((1, 64, 7, 50), (48, 64, 3, 3), "float16", None, True, "gelu_fwd"),
}


def validate(g: sigdnn.Graph, seed: int) -> sigdnn.ValidationReport:
    report = sigdnn.validate(g, seed=seed, executor=sigdnn.Executor("gpu", engine=ENGINE))
    print(report.table())
    return report


@pytest.mark.parametrize("name", list(CASES))
def test_row_conv_validates_against_the_reference(name: str) -> None:
    report = validate(conv_graph(*CASES[name]), 53)
    assert report.builders == {"conv": ENGINE}
    assert report.passed, report.table()


@pytest.mark.parametrize("name", list(FUSED))
def test_row_conv_fused_epilogue_validates(name: str) -> None:
    report = validate(fused_graph(*FUSED[name]), 59)
    last = "act"
    assert report.builders == {f"region(conv..{last})": ENGINE}
    assert report.passed, report.table()


def test_the_default_gpu_executor_takes_the_row_conv_where_it_applies() -> None:
    plan = sigdnn.Executor("gpu").prepare(conv_graph(*CASES["resnet_width"]))
    assert plan.steps[0].builder.name == ENGINE


def test_mirrored_taps_fail_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: a filter row's taps s = 0, 1, 2 multiplied by the x views 2, 1, 0 (every descriptor in
    range) must fail; compiled afresh, past both compile caches."""
    from sigdnn.plan_builders.cute.kernels import conv_launch, conv_rows_sm90
    from sigdnn.plan_builders.cute.kernels.compile_cache import CompileCache

    issue = conv_rows_sm90.HopperConvFpropRows.mma

    def mirrored(self, tiled_mma, acc, tCrA, tCrB, coord, k_tile):
        issue(self, tiled_mma, acc, tCrA[::-1], tCrB, coord, k_tile)

    monkeypatch.setattr(conv_rows_sm90.HopperConvFpropRows, "mma", mirrored)
    monkeypatch.setattr(conv_launch, "_CACHE", CompileCache())
    monkeypatch.setenv("SIGDNN_CUTE_CACHE", "0")
    report = validate(conv_graph(*CASES["k40_odd_width_f32"]), 53)
    assert report.builders == {"conv": ENGINE}
    assert not report.passed
