"""How the CuTe conv fprop builder maps a 2-D NHWC convolution onto im2col + GEMM (pure Python, no GPU)."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.conv import CuteConvFpropBuilder, conv_gemm
from sigdnn.signature_keys import key_for


def conv_graph(
    x_dims=(2, 16, 9, 11),
    w_dims=(24, 16, 3, 3),
    *,
    dtype: str = "bfloat16",
    out: str | None = None,
    layout: str = "NHWC",
    **conv,
) -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", x_dims, layout=layout)
    w = g.tensor("w", w_dims, layout=layout)
    y = g.conv_fprop(x, w, name="conv", **conv).set_output(True).set_name("y")
    if out:
        y.set_data_type(out)
    return g


def test_a_padded_strided_dilated_conv_is_im2col_then_gemm() -> None:
    g = conv_graph((3, 8, 13, 10), (16, 8, 3, 3), pre_padding=(1, 2), post_padding=(0, 1), stride=(2, 1),
                   dilation=(2, 2), out="float32")  # fmt: skip
    view = conv_gemm(g.node_by_name("conv"), g)
    p, q = g.tensor_by_name("y").dims[2:]
    assert (p, q) == ((13 + 1 + 0 - 2 * 2 - 1) // 2 + 1, (10 + 2 + 1 - 2 * 2 - 1) // 1 + 1)
    assert view.im2col == (3, 13, 10, 8, p, q, 3, 3, 1, 2, 2, 1, 2, 2)
    m, k = 3 * p * q, 3 * 3 * 8
    assert (view.problem.m, view.problem.n, view.problem.k) == (m, 16, k)
    assert (view.problem.lda, view.problem.ldb, view.problem.ldc) == (k, k, 16)
    assert (view.spec.a_major, view.spec.b_major, view.spec.c_major, view.spec.c_dtype) == ("k", "k", "n", "float32")
    assert view.workspace_bytes == m * k * 2


def test_a_pointwise_conv_reads_x_directly() -> None:
    g = conv_graph((2, 32, 7, 5), (40, 32, 1, 1), dtype="float16")
    view = conv_gemm(g.node_by_name("conv"), g)
    assert view.im2col is None and view.workspace_bytes == 0
    assert (view.problem.m, view.problem.n, view.problem.k, view.problem.lda) == (70, 40, 32, 32)


def test_a_strided_pointwise_conv_still_gathers() -> None:
    g = conv_graph((2, 32, 8, 8), (40, 32, 1, 1), stride=(2, 2))
    assert conv_gemm(g.node_by_name("conv"), g).im2col is not None


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"layout": "NCHW"}, "channels-last"),
        ({"x_dims": (2, 16, 9, 11), "w_dims": (24, 8, 3, 3)}, "grouped"),
        ({"x_dims": (2, 16, 5, 9, 11), "w_dims": (24, 16, 1, 3, 3), "layout": "NDHWC"}, "3-D"),
        ({"dtype": "float32"}, "dtypes"),
        ({"w_dims": (20, 16, 3, 3)}, "16 bytes"),  # y rows of 20 bfloat16 values: 40 bytes apart
    ],
)
def test_what_the_builder_declines(kw: dict, match: str) -> None:
    g = conv_graph(**kw)
    with pytest.raises(NotSupported, match=match):
        CuteConvFpropBuilder().check(g.node_by_name("conv"), g, None)


def test_serves_2d_16_bit_keys_only() -> None:
    builder = CuteConvFpropBuilder()
    g = conv_graph()
    assert builder.serves(key_for(g.node_by_name("conv"), g))
    g = conv_graph(dtype="float32")
    assert not builder.serves(key_for(g.node_by_name("conv"), g))


@pytest.mark.parametrize(
    ("x_dims", "w_dims", "conv", "kpad"),
    [
        ((2, 3, 32, 30), (64, 3, 7, 7), {"padding": (3, 3), "stride": (2, 2)}, 152),  # 147 -> 152
        ((2, 12, 5, 7), (16, 12, 1, 1), {}, 16),  # a 1x1 conv of 12 channels still gathers: 12 -> 16
        ((2, 3, 32, 32), (24, 3, 16, 16), {"stride": (16, 16)}, 768),  # 768 already a multiple of 8
    ],
)
def test_channels_off_8_pad_a_and_the_filter_rows(x_dims, w_dims, conv, kpad) -> None:
    g = conv_graph(x_dims, w_dims, **conv)
    view = conv_gemm(g.node_by_name("conv"), g)
    n, c, h, w = x_dims
    k, _, r, s = w_dims
    p, q = g.tensor_by_name("y").dims[2:]
    m = n * p * q
    assert view.im2col == (n, h, w, c, p, q, r, s, *g.node_by_name("conv").op.pre_padding,
                           *g.node_by_name("conv").op.stride, 1, 1, kpad)  # fmt: skip
    assert view.filter_padding == (k, 1, 1, r * s * c, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1, kpad)
    assert (view.problem.m, view.problem.n, view.problem.k) == (m, k, kpad)
    assert (view.problem.lda, view.problem.ldb) == (kpad, kpad)
    assert view.a_bytes == m * kpad * 2
    assert view.workspace_bytes == (m + k) * kpad * 2


def test_channels_off_8_still_declines_past_int32() -> None:
    # A: 3782^2 = 14.3M rows; x 147 columns would fit in 2^31 - 1 elements, padded to 152 they do not
    g = conv_graph((1, 3, 3782, 3782), (64, 3, 7, 7), padding=(3, 3))
    assert 3782**2 * 147 < 2**31 - 1 < 3782**2 * 152
    with pytest.raises(NotSupported, match="2\\^31"):
        conv_gemm(g.node_by_name("conv"), g)


def test_the_dtype_refusal_names_all_three_dtypes() -> None:
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", (2, 16, 9, 11), layout="NHWC")
    w = g.tensor("w", (24, 16, 3, 3), layout="NHWC", dtype="float16")
    g.conv_fprop(x, w, padding=(1, 1), name="conv").set_output(True).set_name("y")
    with pytest.raises(NotSupported, match="dtypes x bfloat16, w float16, y bfloat16"):
        conv_gemm(g.node_by_name("conv"), g)


def test_a_size_one_dim_may_carry_any_stride_but_a_longer_one_may_not() -> None:
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", (1, 16, 9, 11), (10**6, 1, 176, 16))  # N = 1 at an arbitrary stride: still packed NHWC
    w = g.tensor("w", (24, 16, 3, 3), layout="NHWC")
    g.conv_fprop(x, w, padding=(1, 1), name="conv").set_output(True).set_name("y").set_stride((2376, 1, 264, 24))
    assert conv_gemm(g.node_by_name("conv"), g).im2col is not None
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", (2, 16, 9, 11), (10**6, 1, 176, 16))  # N = 2 at that stride: not packed
    w = g.tensor("w", (24, 16, 3, 3), layout="NHWC")
    g.conv_fprop(x, w, padding=(1, 1), name="conv").set_output(True).set_name("y")
    with pytest.raises(NotSupported, match="channels-last"):
        conv_gemm(g.node_by_name("conv"), g)


def test_the_padded_filter_counts_against_int32_too() -> None:
    """2^28 output channels of a 1x1 filter on 3 channels: w has 3 * 2^28 elements (fits), its padded copy
    8 * 2^28 = 2^31 (does not)."""
    g = conv_graph((1, 3, 1, 1), (2**28, 3, 1, 1))
    with pytest.raises(NotSupported, match="2\\^31"):
        conv_gemm(g.node_by_name("conv"), g)


def test_padded_a_exactly_at_the_int32_limit() -> None:
    """A 1x1 conv on 3 channels pads A's rows to 8: 16383 x 16385 pixels give 2^31 - 8 elements (taken), 2^14 x
    2^14 give 2^31 (declined)."""
    assert conv_gemm(conv_graph((1, 3, 16383, 16385), (8, 3, 1, 1)).node_by_name("conv"), conv_graph(
        (1, 3, 16383, 16385), (8, 3, 1, 1))).problem.m == 16383 * 16385  # fmt: skip
    g = conv_graph((1, 3, 16384, 16384), (8, 3, 1, 1))
    with pytest.raises(NotSupported, match="2\\^31"):
        conv_gemm(g.node_by_name("conv"), g)


def test_the_builder_is_a_gpu_conv_fprop_builder_of_the_cute_library() -> None:
    from sigdnn.registry.registry import Registry

    found = [b for b in Registry().builders() if b.name == "cute.conv_fprop"]
    assert [(b.library, b.device, b.ops) for b in found] == [("cute", "gpu", ("conv_fprop",))]


def test_the_stem_at_batch_64_runs_in_slices_within_the_im2col_budget() -> None:
    """233 MiB of im2col matrix: the fewest batch slices (a divisor of 64) under 32 MiB are 8, 29 MiB each."""
    g = conv_graph((64, 3, 224, 224), (64, 3, 7, 7), pre_padding=(3, 3), post_padding=(3, 3), stride=(2, 2))
    view = conv_gemm(g.node_by_name("conv"), g)
    rows_per_image, kpad = 112 * 112, 152
    assert view.slices == 8 and view.im2col[0] == 8
    assert (view.problem.m, view.problem.k) == (8 * rows_per_image, kpad)
    assert view.a_bytes == 8 * rows_per_image * kpad * 2 <= 32 << 20 < 16 * rows_per_image * kpad * 2
    assert view.slice_bytes == (8 * 3 * 224 * 224 * 2, 8 * 64 * rows_per_image * 2)
    assert all(type(v) is int for v in (*view.im2col, *view.slice_bytes, view.problem.m)), view  # kernel arguments


def test_an_im2col_matrix_within_the_budget_is_one_slice() -> None:
    g = conv_graph((3, 8, 13, 10), (16, 8, 3, 3), pre_padding=(1, 1), post_padding=(1, 1))
    view = conv_gemm(g.node_by_name("conv"), g)
    assert view.slices == 1 and view.slice_bytes == (3 * 8 * 13 * 10 * 2, 3 * 16 * 13 * 10 * 2)


@pytest.mark.parametrize(("images", "per_image", "divides", "want"),
                         [(64, 512 << 10, 0, 1), (64, 4 << 20, 0, 8), (64, (4 << 20) + 1, 0, 16), (7, 5 << 20, 0, 7),
                          (7, 40 << 20, 0, 7), (64, 1 << 20, 0, 2), (64, 1 << 20, 6, 2), (64, 1 << 20, 3, 1)])  # fmt: skip
def test_batch_slices_by_hand(images: int, per_image: int, divides: int, want: int) -> None:
    from sigdnn.plan_builders.cute.batch_slices import batch_slices

    assert batch_slices(images, per_image, divides) == want
