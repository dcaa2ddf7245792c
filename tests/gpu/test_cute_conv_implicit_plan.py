"""How the implicit-GEMM conv builder reads a 2-D NHWC conv and its epilogue chain (pure Python, no GPU)."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.conv_implicit import CuteConvImplicitBuilder, epilogue_chain, plan_conv
from sigdnn.plan_builders.cute.conv_implicit_configs import default_conv_config
from sigdnn.registry.regions import Dataflow
from sigdnn.signature_keys import key_for


def conv_graph(x_dims=(2, 16, 9, 11), w_dims=(24, 16, 3, 3), *, dtype="bfloat16", out=None, layout="NHWC", **conv):
    g = sigdnn.Graph("conv", io_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", x_dims, layout=layout)
    w = g.tensor("w", w_dims, layout=layout)
    y = g.conv_fprop(x, w, name="conv", **conv).set_output(True).set_name("y")
    if out:
        y.set_data_type(out)
    return g


def chain_graph(*, bias_dims=(1, 24, 1, 1), act="relu_fwd", mid="bfloat16", extra_reader=False, clip=None):
    g = sigdnn.Graph("chain", io_dtype="bfloat16", intermediate_dtype=mid, compute_dtype="float32")
    x, w = g.tensor("x", (2, 16, 9, 11), layout="NHWC"), g.tensor("w", (24, 16, 3, 3), layout="NHWC")
    y = g.conv_fprop(x, w, name="conv", padding=(1, 1))
    if bias_dims is not None:
        y = g.pointwise("add", y, g.tensor("bias", bias_dims, layout="NHWC"), name="bias")
    if extra_reader:
        g.pointwise("tanh_fwd", y, name="other").set_output(True)
    if act is not None:
        y = g.pointwise(act, y, name="act", **({} if clip is None else {"relu_upper_clip": clip}))
    y.set_output(True).set_name("out")
    return g


def chain_of(g: sigdnn.Graph):
    return epilogue_chain(g, Dataflow(g, list(range(len(g.nodes)))), 0)


def test_geometry_is_what_the_kernel_is_launched_with() -> None:
    g = conv_graph((3, 8, 13, 10), (16, 8, 3, 3), pre_padding=(1, 2), post_padding=(0, 1), stride=(2, 1),
                   dilation=(2, 2), out="float32")  # fmt: skip
    view = plan_conv(g.node_by_name("conv"), g)
    p, q = g.tensor_by_name("y").dims[2:]
    assert view.geometry == (3, 13, 10, 8, 16, 3, 3, p, q, 1, 2, 0, 1, 2, 1, 2, 2)
    assert view.m == 3 * p * q and view.k_out == 16
    s = view.spec
    assert (s.a_major, s.b_major, s.c_major, s.c_dtype, s.bias_dtype, s.activation) == ("k", "k", "n", "float32", None, "none")  # fmt: skip


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"layout": "NCHW"}, "channels-last"),
        ({"x_dims": (2, 16, 9, 11), "w_dims": (24, 8, 3, 3)}, "grouped"),
        ({"x_dims": (2, 12, 9, 11), "w_dims": (24, 12, 3, 3)}, "multiples of 8"),
        ({"x_dims": (2, 16, 11), "w_dims": (24, 16, 3), "layout": "NWC"}, "1-D"),
        (
            {"x_dims": (1, 16, 40, 8, 8), "w_dims": (24, 16, 3, 3, 3), "padding": (17, 1, 1), "layout": "NDHWC"},
            "corner",
        ),
        ({"dtype": "float32"}, "dtypes"),
        ({"w_dims": (20, 16, 3, 3)}, "multiple of 8"),  # y rows of 20 bfloat16 values: 40 bytes apart
        ({"x_dims": (1, 16, 40, 40), "stride": (9, 1)}, "strides up to 8"),
        ({"x_dims": (1, 16, 300, 8), "padding": (129, 0)}, "corner"),
        ({"x_dims": (1, 16, 300, 8), "dilation": (70, 1)}, "corner"),  # upper corner 0 - 2 * 70 = -140
    ],
)
def test_what_the_builder_declines(kw: dict, match: str) -> None:
    g = conv_graph(**kw)
    with pytest.raises(NotSupported, match=match):
        CuteConvImplicitBuilder().check(g.node_by_name("conv"), g, None)


def test_corners_at_the_edge_of_the_range_are_accepted() -> None:
    g = conv_graph((1, 16, 300, 8), padding=(128, 0))
    plan_conv(g.node_by_name("conv"), g)


def test_bias_and_relu_are_absorbed_with_their_rounding() -> None:
    g = chain_graph()
    chain = chain_of(g)
    assert [g.nodes[i].name for i in chain.nodes] == ["conv", "bias", "act"]
    assert chain.bias == g.tensor_by_name("bias").uid and chain.activation == "relu"
    spec = plan_conv(g.node_by_name("conv"), g, chain).spec
    assert (spec.bias_dtype, spec.round_x, spec.round_y, spec.activation) == ("bfloat16", "bfloat16", "bfloat16", "relu")  # fmt: skip


@pytest.mark.parametrize(
    ("kw", "names"),
    [
        ({"bias_dims": (1, 24, 1, 11)}, ["conv"]),  # not one value per channel: nothing to fuse
        ({"bias_dims": (1, 1, 1, 11)}, ["conv"]),
        ({"extra_reader": True}, ["conv", "bias"]),  # the bias output is read twice: the chain stops there
        ({"clip": 6.0}, ["conv", "bias"]),  # a clipped relu is not the epilogue's relu
        ({"act": "gelu_approx_tanh_fwd"}, ["conv", "bias", "act"]),
        ({"bias_dims": None}, ["conv", "act"]),
    ],
)
def test_what_the_chain_takes(kw: dict, names: list[str]) -> None:
    g = chain_graph(**kw)
    chain = chain_of(g)
    got = ["conv"] if chain is None else [g.nodes[i].name for i in chain.nodes]
    assert got == names


@pytest.mark.parametrize(
    ("m", "k", "label"),
    [
        (64 * 56 * 56, 64, "coop256x64c1x1s1"),
        (64 * 28 * 28, 128, "coop128x128c1x1s1"),  # 3 waves of 128x128 cost less than 2 of 256x128
        (64 * 14 * 14, 256, "coop128x256c1x1s1"),  # 98 tiles: most SMs busy
        (64 * 7 * 7, 512, "coop128x128c1x1s1"),  # 100 tiles of 128x128, where 50 of 128x256 would idle 82 SMs
        (64 * 56 * 56, 256, "coop128x256c1x1s1"),
        (198, 24, "pp128x128c1x1s1"),
    ],
)
def test_default_config(m: int, k: int, label: str) -> None:
    g = conv_graph((1, 64, 8, 8), (k, 64, 1, 1))
    view = plan_conv(g.node_by_name("conv"), g)
    view = type(view)(view.spec, (m, 1, 1, 64, k, 1, 1, 1, 1, *view.geometry[9:]))
    assert default_conv_config(view, 132).label == label


def test_serves_2d_16_bit_keys_only() -> None:
    builder = CuteConvImplicitBuilder()
    g = conv_graph()
    assert builder.serves(key_for(g.node_by_name("conv"), g))
    g = conv_graph(dtype="float32")
    assert not builder.serves(key_for(g.node_by_name("conv"), g))


def test_a_3d_conv_is_read_as_the_rank_5_im2col_walk() -> None:
    g = conv_graph((2, 16, 5, 7, 6), (24, 16, 3, 2, 3), layout="NDHWC", pre_padding=(1, 0, 2),
                   post_padding=(0, 1, 0), stride=(2, 1, 1), dilation=(1, 2, 1))  # fmt: skip
    view = plan_conv(g.node_by_name("conv"), g)
    z, p, q = g.tensor_by_name("y").dims[2:]
    assert (z, p, q) == ((5 + 1 - 2 - 1) // 2 + 1, 7 + 0 + 1 - 2, 6 + 2 - 2)
    assert view.geometry == (2, 5, 7, 6, 16, 24, 3, 2, 3, z, p, q, 1, 0, 2, 0, 1, 0, 2, 1, 1, 1, 2, 1)
    assert view.rank == 3 and view.m == 2 * z * p * q and view.k_out == 24


def test_3d_corners_have_the_rank_5_range() -> None:
    g = conv_graph((1, 16, 40, 8, 8), (24, 16, 3, 3, 3), layout="NDHWC", padding=(16, 1, 1))
    plan_conv(g.node_by_name("conv"), g)  # -16 is the lowest corner a rank-5 im2col box takes
