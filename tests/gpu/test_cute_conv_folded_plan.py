"""How the folded conv builder turns a few-channel conv into two gathers and an implicit GEMM (pure Python, no GPU).

The gathers' extents and the folded conv's geometry are checked by meaning:
x' and w' formed with ``kernels/im2col.py``'s documented formula from those
extents, convolved with the folded geometry by a loop in NumPy, give the
direct convolution of x and w.
"""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute import batch_slices
from sigdnn.plan_builders.cute.conv_folded import CuteConvFoldedBuilder, folded_conv
from sigdnn.plan_builders.cute.conv_geometry import unpack
from sigdnn.signature_keys import key_for


def conv_graph(x_dims, w_dims, *, dtype="bfloat16", layout="NHWC", **conv) -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype=dtype, compute_dtype="float32")
    x, w = g.tensor("x", x_dims, layout=layout), g.tensor("w", w_dims, layout=layout)
    g.conv_fprop(x, w, name="conv", **conv).set_output(True).set_name("y")
    return g


def im2col(image: np.ndarray, extents: tuple[int, ...]) -> np.ndarray:
    """A[(n, p, q), (r, s, c)] = x[n, p*sh - ph + r*dh, q*sw - pw + s*dw, c] (0 outside), rows padded to kpad:
    the narrow im2col kernel's formula, on an (N, H, W, C) array, as (N, P, Q, kpad)."""
    n, h, w, c, p, q, r, s, ph, pw, sh, sw, dh, dw, kpad = extents
    assert image.shape == (n, h, w, c)
    out = np.zeros((n, p, q, kpad))
    for i in range(p):
        for j in range(q):
            for t in range(r):
                for u in range(s):
                    row, col = i * sh - ph + t * dh, j * sw - pw + u * dw
                    if 0 <= row < h and 0 <= col < w:
                        out[:, i, j, (t * s + u) * c : (t * s + u + 1) * c] = image[:, row, col, :]
    return out


def direct_conv(x: np.ndarray, w: np.ndarray, out: tuple[int, int], pre, stride, dilation) -> np.ndarray:
    """y[n, p, q, k] of channels-last x (N, H, W, C) and w (K, R, S, C), zeros outside x."""
    n, h, wd, _ = x.shape
    k, r, s, _ = w.shape
    y = np.zeros((n, *out, k))
    for i in range(out[0]):
        for j in range(out[1]):
            for t in range(r):
                for u in range(s):
                    row = i * stride[0] - pre[0] + t * dilation[0]
                    col = j * stride[1] - pre[1] + u * dilation[1]
                    if 0 <= row < h and 0 <= col < wd:
                        y[:, i, j, :] += x[:, row, col, :] @ w[:, t, u, :].T
    return y


CASES = {
    # name: (x dims, w dims, conv arguments, Cp)
    "resnet_stem": ((2, 3, 23, 21), (8, 3, 7, 7), {"padding": (3, 3), "stride": (2, 2)}, 24),
    "asymmetric_dilated": (
        (1, 5, 13, 17),
        (8, 5, 3, 3),
        {"pre_padding": (2, 1), "post_padding": (0, 2), "stride": (1, 3), "dilation": (2, 2)},
        16,
    ),
    "one_channel_wide": ((2, 1, 9, 30), (16, 1, 5, 11), {"padding": (2, 5), "stride": (2, 2)}, 16),
    "one_width_tap": ((1, 6, 7, 8), (8, 6, 3, 1), {"padding": (1, 0)}, 8),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_folded_conv_is_the_conv(name: str) -> None:
    x_dims, w_dims, conv, cp = CASES[name]
    g = conv_graph(x_dims, w_dims, **conv)
    node = g.node_by_name("conv")
    view = folded_conv(node, g)
    assert view.slices == 1 and view.gather_x[-1] == view.gather_w[-1] == cp
    rng = np.random.default_rng(0)
    n, c, h, wd = x_dims
    k, _, r, s = w_dims
    x, w = rng.standard_normal((n, h, wd, c)), rng.standard_normal((k, r, s, c))
    p, q = g.tensor_by_name("y").dims[2:]
    op = node.op
    want = direct_conv(x, w, (p, q), op.pre_padding, op.stride, op.dilation)
    folded_x = im2col(x, view.gather_x)  # (N, H, Q, Cp)
    folded_w = im2col(w, view.gather_w)  # (K, R, 1, Cp)
    g2 = unpack(view.conv.geometry)
    assert (g2["n"], *g2["in"], g2["c"], g2["k"]) == (n, *folded_x.shape[1:3], cp, k)
    assert tuple(g2["taps"]) == folded_w.shape[1:3] and tuple(g2["out"]) == (p, q)
    got = direct_conv(folded_x, folded_w, tuple(g2["out"]), g2["pre"], g2["stride"], g2["dilation"])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_the_stem_at_batch_64_runs_in_slices_through_one_slice_of_x() -> None:
    g = conv_graph((64, 3, 224, 224), (64, 3, 7, 7), padding=(3, 3), stride=(2, 2))
    view = folded_conv(g.node_by_name("conv"), g)
    per_image = 224 * 112 * 24 * 2  # x': every input row, every output column, 21 channels padded to 24
    assert view.slices * per_image * (64 // view.slices) == 64 * per_image
    assert 64 // view.slices * per_image <= batch_slices.IM2COL_BUDGET < 2 * (64 // view.slices) * per_image
    assert view.slice_bytes == (64 // view.slices * 3 * 224 * 224 * 2, 64 // view.slices * per_image,
                                64 // view.slices * 64 * 112 * 112 * 2)  # fmt: skip
    assert view.filter_offset == view.slice_bytes[1]
    assert view.workspace_bytes == view.slice_bytes[1] + 64 * 7 * 24 * 2


@pytest.mark.parametrize(
    ("x_dims", "w_dims", "kw", "match"),
    [
        ((2, 8, 9, 9), (16, 8, 3, 3), {}, "multiple of 8"),
        ((2, 16, 9, 9), (16, 16, 3, 3), {}, "multiple of 8"),
        ((2, 3, 64, 64), (16, 3, 16, 16), {"stride": (16, 16)}, "strides up to 8"),  # 48 fold
        ((2, 5, 64, 64), (16, 5, 3, 13), {}, "at most 64"),  # 65 channels
        ((2, 3, 64, 64), (16, 3, 7, 7), {"stride": (9, 1)}, "strides up to 8"),
        ((2, 3, 9, 9), (16, 3, 3, 3), {"layout": "NCHW"}, "channels-last"),
        ((2, 3, 9, 9), (16, 3, 3, 3), {"dtype": "float32"}, "dtypes"),
        ((2, 6, 9, 9), (16, 3, 3, 3), {}, "grouped"),
        ((2, 3, 5, 9, 9), (16, 3, 1, 3, 3), {"layout": "NDHWC"}, "3-D"),
    ],
)
def test_what_the_builder_declines(x_dims, w_dims, kw, match) -> None:
    g = conv_graph(x_dims, w_dims, **kw)
    with pytest.raises(NotSupported, match=match):
        CuteConvFoldedBuilder().check(g.node_by_name("conv"), g, None)


def test_it_serves_the_im2col_builders_keys() -> None:
    builder = CuteConvFoldedBuilder()
    g = conv_graph((2, 3, 9, 9), (16, 3, 3, 3))
    assert builder.serves(key_for(g.node_by_name("conv"), g))
    g = conv_graph((2, 3, 9, 9), (16, 3, 3, 3), dtype="float32")
    assert not builder.serves(key_for(g.node_by_name("conv"), g))


def test_x_and_w_must_share_a_dtype_but_y_may_be_wider() -> None:
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (2, 3, 9, 9), layout="NHWC"), g.tensor("w", (16, 3, 3, 3), layout="NHWC", dtype="float16")
    g.conv_fprop(x, w, name="conv").set_output(True).set_name("y")
    with pytest.raises(NotSupported, match="dtypes x bfloat16, w float16, y bfloat16"):
        folded_conv(g.node_by_name("conv"), g)
    g = conv_graph((2, 3, 9, 9), (16, 3, 3, 3))
    g.tensor_by_name("y").set_data_type("float32")
    assert folded_conv(g.node_by_name("conv"), g).slice_bytes[2] == 2 * 16 * 7 * 7 * 4


def test_the_folded_filter_counts_against_int32() -> None:
    """2^27 output channels of a 2x1 filter on 3 channels: w has 6 * 2^27 elements (fits), w' 16 * 2^27 (does not)."""
    g = conv_graph((1, 3, 2, 1), (2**27, 3, 2, 1))  # two height taps: w' is K * R * Cp = 2^27 * 2 * 8
    with pytest.raises(NotSupported, match="2\\^31"):
        folded_conv(g.node_by_name("conv"), g)


def test_the_folded_conv_runs_the_implicit_builders_kernel_specialization() -> None:
    """The same GemmSpec the implicit builder gives an ordinary conv of these dtypes: one compiled kernel serves."""
    from sigdnn.plan_builders.cute.conv_implicit import plan_conv

    for dtype, out in (("bfloat16", "bfloat16"), ("float16", "float32")):
        narrow, wide = (
            conv_graph((2, 3, 9, 9), (16, 3, 3, 3), dtype=dtype),
            conv_graph((2, 8, 9, 9), (16, 8, 3, 3), dtype=dtype),
        )
        for g in (narrow, wide):
            g.tensor_by_name("y").set_data_type(out)
        assert (
            folded_conv(narrow.node_by_name("conv"), narrow).conv.spec
            == plan_conv(wide.node_by_name("conv"), wide).spec
        )


def test_the_registry_offers_it_for_the_stem_before_the_im2col_builder(monkeypatch) -> None:
    """The 3-channel stem's first candidate: ranked above cute.conv_fprop, whose im2col matrix is 7x x'."""
    from sigdnn.plan_builders.cute import conv
    from sigdnn.registry.registry import DEFAULT_REGISTRY

    monkeypatch.setattr(conv, "unavailable_reason", lambda: None)
    g = conv_graph((2, 3, 32, 32), (16, 3, 7, 7), padding=(3, 3), stride=(2, 2))
    node = g.node_by_name("conv")
    names = [b.name for b in DEFAULT_REGISTRY.candidates(key_for(node, g), "gpu", node, g)]
    assert names[0] == "cute.conv_fprop_folded"
    assert names.index("cute.conv_fprop_folded") < names.index("cute.conv_fprop")


def test_sixty_four_folded_channels_fit_one_k_step() -> None:
    g = conv_graph((2, 4, 9, 40), (8, 4, 3, 16), padding=(1, 0))
    assert folded_conv(g.node_by_name("conv"), g).gather_x[-1] == 64


def test_it_takes_conv_fprop_in_float32_compute_only() -> None:
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    g.matmul(g.tensor("a", (8, 8)), g.tensor("b", (8, 8)), name="mm").set_output(True)
    with pytest.raises(NotSupported, match="not a conv_fprop"):
        folded_conv(g.node_by_name("mm"), g)
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float64")
    x, w = g.tensor("x", (2, 3, 9, 9), layout="NHWC"), g.tensor("w", (16, 3, 3, 3), layout="NHWC")
    g.conv_fprop(x, w, name="conv").set_output(True)
    with pytest.raises(NotSupported, match="compute dtype float64"):
        folded_conv(g.node_by_name("conv"), g)


def test_it_is_available_where_cute_dsl_is(monkeypatch) -> None:
    from sigdnn.plan_builders.cute import conv

    monkeypatch.setattr(conv, "unavailable_reason", lambda: "no CuTe DSL here")
    assert CuteConvFoldedBuilder().available() == "no CuTe DSL here"


def test_it_declines_a_gpu_other_than_hopper(monkeypatch) -> None:
    from sigdnn.plan_builders import gpu_properties
    from sigdnn.runtime.device import Device

    monkeypatch.setattr(gpu_properties, "device_properties", lambda device_id: ((10, 0), 148))
    g = conv_graph((2, 3, 9, 9), (16, 3, 3, 3))
    with pytest.raises(NotSupported, match="sm_90"):
        CuteConvFoldedBuilder().check(g.node_by_name("conv"), g, Device("gpu", None))


def test_an_x_past_int32_is_declined_though_x_prime_fits() -> None:
    """One width tap at width stride 8: x' holds an eighth of x's columns (8 channels for 3), so x (2.7e9 elements)
    passes 2^31 where x' (9e8) and y (1.8e9) do not: the gather's int32 offsets into x would overflow."""
    g = conv_graph((1, 3, 30000, 30000), (16, 3, 1, 1), stride=(1, 8))
    assert 3 * 30000 * 30000 > 2**31 > 16 * 30000 * 3750
    with pytest.raises(NotSupported, match="2\\^31"):
        folded_conv(g.node_by_name("conv"), g)
