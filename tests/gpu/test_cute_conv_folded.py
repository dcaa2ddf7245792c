"""The folded conv (width taps into channels, then the implicit GEMM) on a GPU, judged by sigdnn.validate.

Shapes of few input channels: the ResNet stem at its own size, odd sizes
off every tile, asymmetric padding, stride and dilation, one channel, a
filter one tap wide; 16- and 32-bit outputs; every image its own batch
slice. Skips (with the reason) without a GPU, without nvidia-cutlass-dsl,
or on a device other than sm_90.
"""

from __future__ import annotations

import pytest
from cute_skip import skip_unless_sm90

import sigdnn

pytestmark = pytest.mark.gpu


skip_unless_sm90("the CuTe conv")

ENGINE = "cute.conv_fprop_folded"
CASES = {
    # name: (x dims, w dims, io dtype, out dtype, conv arguments)
    "resnet_stem": ((2, 3, 224, 224), (64, 3, 7, 7), "bfloat16", "bfloat16", {"padding": (3, 3), "stride": (2, 2)}),
    "stem_odd_sizes": ((3, 3, 37, 41), (32, 3, 7, 7), "float16", "float32", {"padding": (3, 3), "stride": (2, 2)}),
    "asymmetric_dilated": (
        (2, 5, 19, 23),
        (24, 5, 3, 3),
        "bfloat16",
        "float32",
        {"pre_padding": (2, 1), "post_padding": (0, 2), "stride": (1, 3), "dilation": (2, 2)},
    ),
    "one_channel_5x11": ((2, 1, 17, 30), (16, 1, 5, 11), "float16", "float16", {"padding": (2, 5), "stride": (2, 2)}),
    "one_width_tap": ((1, 6, 7, 8), (8, 6, 3, 1), "bfloat16", "bfloat16", {"padding": (1, 0)}),
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
    report = sigdnn.validate(g, seed=11, executor=sigdnn.Executor("gpu", engine=ENGINE))
    assert report.builders == {"conv": ENGINE}
    assert report.passed, report.table()


def test_the_default_executor_runs_the_stem_folded() -> None:
    """Unpinned, the stem's conv goes to the folded builder (ranked first) and validates."""
    report = sigdnn.validate(conv_graph(*CASES["resnet_stem"]), seed=5, executor=sigdnn.Executor("gpu"))
    assert report.builders == {"conv": ENGINE}
    assert report.passed, report.table()


@pytest.mark.parametrize("name", ["stem_odd_sizes", "one_channel_5x11"])
def test_every_image_its_own_slice_validates(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A budget of one byte: every image its own slice of x', each through the same workspace."""
    from sigdnn.plan_builders.cute import batch_slices
    from sigdnn.plan_builders.cute.conv_folded import folded_conv

    monkeypatch.setattr(batch_slices, "IM2COL_BUDGET", 1)
    g = conv_graph(*CASES[name])
    assert folded_conv(g.node_by_name("conv"), g).slices == g.tensor_by_name("x").dims[0]
    report = sigdnn.validate(g, seed=13, executor=sigdnn.Executor("gpu", engine=ENGINE))
    assert report.passed, report.table()


def test_a_planted_off_by_one_width_padding_fails_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    """x' gathered one column to the right of where the folded conv expects it: validation must catch it."""
    import attrs

    from sigdnn.plan_builders.cute import conv_folded

    real = conv_folded.folded_conv

    def shifted(node, graph):
        view = real(node, graph)
        extents = list(view.gather_x)
        extents[9] -= 1  # pad_w
        return attrs.evolve(view, gather_x=tuple(extents))

    monkeypatch.setattr(conv_folded, "folded_conv", shifted)
    report = sigdnn.validate(
        conv_graph(*CASES["stem_odd_sizes"]), seed=11, executor=sigdnn.Executor("gpu", engine=ENGINE)
    )
    assert not report.passed
