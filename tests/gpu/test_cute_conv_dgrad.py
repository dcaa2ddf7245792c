"""The CuTe conv dgrad (filter flip + implicit-GEMM fprop over dy) on a GPU, judged by sigdnn.validate.

Padding (asymmetric too, and none), dilation, 1x1 / 3x3 / 5x3 filters,
channel counts off the tiles, 16- and 32-bit outputs; strides 2, 3 and 4
(by stride phases: a sub-filter gather, one fprop per phase, the
interleave), odd extents whose last rows no window reaches, phases no tap
reaches (1x1 stride 2 and 3, R below the stride), phases padded with zero
taps (an even filter, dilation sharing the stride), ResNet-50's stride-2
layers at batch 2, and planted bugs (a window shifted a pixel, two phases'
outputs swapped) that must fail. Skips without a GPU, nvidia-cutlass-dsl or
sm_90.
"""

from __future__ import annotations

import attrs
import pytest
from cute_skip import skip_unless_sm90

import sigdnn
from sigdnn.plan_builders.cute import conv_dgrad

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe conv dgrad")

ENGINE = "cute.conv_dgrad"
CASES = {
    # name: (dy dims, w dims, io dtype, dx dtype, conv arguments)
    "3x3_pad1": ((2, 24, 9, 11), (24, 16, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    "3x3_valid_f32": ((2, 40, 7, 9), (40, 24, 3, 3), "float16", "float32", {}),
    "asymmetric_dilated": (
        (3, 16, 10, 9),
        (16, 8, 3, 3),
        "bfloat16",
        "float32",
        {"pre_padding": (1, 2), "post_padding": (0, 1), "dilation": (2, 2)},
    ),
    "pointwise": ((2, 64, 7, 5), (64, 40, 1, 1), "float16", "float16", {}),
    "5x3_channel_tails": ((2, 72, 12, 10), (72, 136, 5, 3), "bfloat16", "bfloat16", {"padding": (2, 1)}),
    "resnet_like": ((4, 64, 28, 28), (64, 64, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    # Strided: dx's dims given (several dx extents have the same dy).
    "stride2_pad1": ((2, 24, 9, 11), (24, 16, 3, 3), "bfloat16", "bfloat16",
                     {"padding": (1, 1), "stride": (2, 2), "dims": (2, 16, 18, 22)}),
    "stride2_odd_tails_f32": ((3, 40, 7, 6), (40, 72, 3, 3), "bfloat16", "float32",
                              {"padding": (1, 1), "stride": (2, 2), "dims": (3, 72, 13, 11)}),
    "stride3x2_dilated_asymmetric": (
        (2, 16, 6, 8),
        (16, 24, 3, 2),
        "float16",
        "float16",
        {"pre_padding": (2, 0), "post_padding": (1, 1), "stride": (3, 2), "dilation": (2, 1), "dims": (2, 24, 17, 16)},
    ),
    "1x1_stride2_shortcut": ((2, 128, 7, 7), (128, 64, 1, 1), "bfloat16", "bfloat16",
                             {"stride": (2, 2), "dims": (2, 64, 14, 14)}),
    "1x1_stride3_odd": ((2, 16, 4, 3), (16, 24, 1, 1), "float16", "float32", {"stride": (3, 3), "dims": (2, 24, 11, 8)}),
    "2x1_below_stride3": ((2, 24, 3, 4), (24, 16, 2, 1), "bfloat16", "bfloat16",
                          {"stride": (3, 3), "dims": (2, 16, 9, 10)}),
    "2x2_pad1_zero_taps": ((3, 16, 5, 5), (16, 32, 2, 2), "bfloat16", "float32",
                           {"padding": (1, 1), "stride": (2, 2), "dims": (3, 32, 8, 8)}),
    "dilation_sharing_stride": ((2, 32, 6, 6), (32, 16, 3, 3), "float16", "float16",
                                {"padding": (2, 2), "stride": (2, 2), "dilation": (2, 2), "dims": (2, 16, 12, 11)}),
    "5x5_stride3": ((2, 40, 4, 4), (40, 24, 5, 5), "bfloat16", "bfloat16",
                    {"padding": (2, 2), "stride": (3, 3), "dims": (2, 24, 10, 11)}),
    "4x4_stride4_patchify": ((2, 64, 5, 6), (64, 32, 4, 4), "bfloat16", "bfloat16",
                             {"stride": (4, 4), "dims": (2, 32, 20, 24)}),
    # ResNet-50's stride-2 layers (torchvision: the 3x3 of the first block of stages 3-5, and its shortcut).
    "resnet_conv3_3x3_s2": ((2, 128, 28, 28), (128, 128, 3, 3), "bfloat16", "bfloat16",
                            {"padding": (1, 1), "stride": (2, 2), "dims": (2, 128, 56, 56)}),
    "resnet_conv4_3x3_s2": ((2, 256, 14, 14), (256, 256, 3, 3), "bfloat16", "bfloat16",
                            {"padding": (1, 1), "stride": (2, 2), "dims": (2, 256, 28, 28)}),
    "resnet_conv5_3x3_s2": ((2, 512, 7, 7), (512, 512, 3, 3), "bfloat16", "float32",
                            {"padding": (1, 1), "stride": (2, 2), "dims": (2, 512, 14, 14)}),
    "resnet_conv3_shortcut_s2": ((2, 512, 28, 28), (512, 256, 1, 1), "bfloat16", "bfloat16",
                                 {"stride": (2, 2), "dims": (2, 256, 56, 56)}),
}  # fmt: skip


def dgrad_graph(dy_dims, w_dims, dtype: str, out: str, conv: dict) -> sigdnn.Graph:
    g = sigdnn.Graph("dgrad", io_dtype=dtype, compute_dtype="float32")
    dy = g.tensor("dy", dy_dims, layout="NHWC")
    w = g.tensor("w", w_dims, layout="NHWC")
    g.conv_dgrad(dy, w, name="dgrad", **conv).set_output(True).set_name("dx").set_data_type(out)
    return g


@pytest.mark.parametrize("name", list(CASES))
def test_conv_dgrad_validates_against_the_reference(name: str) -> None:
    g = dgrad_graph(*CASES[name])
    report = sigdnn.validate(g, seed=23, executor=sigdnn.Executor("gpu", engine=ENGINE))
    print(report.table())
    assert report.builders == {"dgrad": ENGINE}
    assert report.passed, report.table()


def assert_planted_bug_caught() -> None:
    """The stride-2 case, still planned by the dgrad builder, fails validation (a planted bug is in place)."""
    report = sigdnn.validate(
        dgrad_graph(*CASES["stride2_pad1"]), seed=23, executor=sigdnn.Executor("gpu", engine=ENGINE)
    )
    assert report.builders == {"dgrad": ENGINE}
    assert not report.passed


def test_a_window_shifted_by_one_pixel_fails_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: one more pixel of padding before dy's rows and one less after, in every phase, keeps
    every extent but moves every window; the validation this file relies on must see it."""
    real = conv_dgrad.plan_dgrad

    def shifted(node, graph):
        plan = real(node, graph)
        moved = []
        for view in plan.convs:
            if view is not None:
                g = list(view.geometry)
                g[9] += 1  # pad_h
                g[11] -= 1  # pad_h_hi
                view = attrs.evolve(view, geometry=tuple(g))
            moved.append(view)
        return attrs.evolve(plan, convs=tuple(moved))

    monkeypatch.setattr(conv_dgrad, "plan_dgrad", shifted)
    assert_planted_bug_caught()


def test_two_phases_interleaved_from_each_others_outputs_fail_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: the interleave reads phase (0, 1)'s output for phase (1, 0) and the reverse (both 9 x 11,
    every read in range); the validation must see it."""
    real = conv_dgrad.phase_layout

    def swapped(*args, **kw):
        layout = real(*args, **kw)
        table = list(layout.interleave)
        table[3], table[6] = table[6], table[3]
        return attrs.evolve(layout, interleave=tuple(table))

    monkeypatch.setattr(conv_dgrad, "phase_layout", swapped)
    assert_planted_bug_caught()
