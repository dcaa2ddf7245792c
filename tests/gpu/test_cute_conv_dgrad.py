"""The CuTe conv dgrad (filter flip + implicit-GEMM fprop over dy) on a GPU, judged by sigdnn.validate.

Padding (asymmetric too, and none), dilation, 1x1 / 3x3 / 5x3 filters,
channel counts off the tiles, 16- and 32-bit outputs; strides 2 and 3 (dy
with zeros inserted), odd extents whose last rows no window reaches, and a
planted bug (the window shifted a pixel) that must fail. Skips without a
GPU, nvidia-cutlass-dsl or sm_90.
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


def test_a_window_shifted_by_one_pixel_fails_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: one more pixel of padding before dy's zero-inserted rows and one less after keeps
    every extent but moves every window; the validation this file relies on must see it."""
    real = conv_dgrad.plan_dgrad

    def shifted(node, graph):
        view = real(node, graph)
        g = list(view.geometry)
        g[9] += 1  # pad_h
        g[11] -= 1  # pad_h_hi
        return attrs.evolve(view, geometry=tuple(g))

    monkeypatch.setattr(conv_dgrad, "plan_dgrad", shifted)
    report = sigdnn.validate(
        dgrad_graph(*CASES["stride2_pad1"]), seed=23, executor=sigdnn.Executor("gpu", engine=ENGINE)
    )
    assert report.builders == {"dgrad": ENGINE}
    assert not report.passed
