"""The CuTe conv fprop (im2col + Hopper GEMM) on a GPU, judged by sigdnn.validate against the float64 reference.

Shapes are awkward: spatial sizes off every tile, padding (asymmetric too),
stride, dilation, a 5x1 filter, a 1x1 filter read in place, a ResNet-like
3x3 layer; 16- and 32-bit outputs. Skips (with the reason) without a GPU,
without nvidia-cutlass-dsl, or on a device other than sm_90.
"""

from __future__ import annotations

import pytest
from cute_skip import skip_unless_sm90

import sigdnn

pytestmark = pytest.mark.gpu


skip_unless_sm90("the CuTe conv")

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
    "pointwise_in_place": ((2, 32, 7, 5), (40, 32, 1, 1), "float16", "float16", {}),
    "5x1_stride_1x3": ((1, 24, 17, 19), (8, 24, 5, 1), "float16", "float32", {"stride": (1, 3)}),
    "resnet_like_3x3": ((4, 64, 28, 28), (64, 64, 3, 3), "bfloat16", "bfloat16", {"padding": (1, 1)}),
    # C not a multiple of 8: A's and the filter's rows padded to 16 bytes
    "stem_7x7_3_channels": (
        (2, 3, 37, 41),
        (64, 3, 7, 7),
        "bfloat16",
        "bfloat16",
        {"padding": (3, 3), "stride": (2, 2)},
    ),
    "patch_16x16_3_channels": ((2, 3, 64, 48), (32, 3, 16, 16), "bfloat16", "float32", {"stride": (16, 16)}),
    "pointwise_12_channels": ((2, 12, 5, 7), (16, 12, 1, 1), "float16", "float16", {}),
    "1_channel_5x3": ((3, 1, 11, 9), (8, 1, 5, 3), "float16", "float32", {"padding": (2, 1)}),
}


def conv_graph(x_dims, w_dims, dtype: str, out: str, conv: dict) -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", x_dims, layout="NHWC")
    w = g.tensor("w", w_dims, layout="NHWC")
    g.conv_fprop(x, w, name="conv", **conv).set_output(True).set_name("y").set_data_type(out)
    return g


@pytest.mark.parametrize("name", list(CASES))
def test_conv_fprop_validates_against_the_reference(name: str) -> None:
    g = conv_graph(*CASES[name])
    report = sigdnn.validate(g, seed=11, executor=sigdnn.Executor("gpu", engine="cute.conv_fprop"))
    print(report.table())
    assert report.builders == {"conv": "cute.conv_fprop"}
    assert report.passed, report.table()


@pytest.mark.parametrize("name", ["stem_7x7_3_channels", "3x3_pad1", "1_channel_5x3"])
def test_batch_slices_validate(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget of one image's im2col rows: every image its own slice, each through the same workspace."""
    from sigdnn.plan_builders.cute import batch_slices
    from sigdnn.plan_builders.cute.conv import conv_gemm

    monkeypatch.setattr(batch_slices, "IM2COL_BUDGET", 1)
    g = conv_graph(*CASES[name])
    assert conv_gemm(g.node_by_name("conv"), g).slices == g.tensor_by_name("x").dims[0]
    report = sigdnn.validate(g, seed=13, executor=sigdnn.Executor("gpu", engine="cute.conv_fprop"))
    assert report.passed, report.table()
