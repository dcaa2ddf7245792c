"""How the transposed and row conv builders read a conv (pure Python, no GPU): which convs they take, their view."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from test_cute_conv_implicit_plan import chain_graph, conv_graph

from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.conv_implicit import CuteConvImplicitBuilder, epilogue_chain, plan_conv
from sigdnn.plan_builders.cute.conv_transposed import (
    MAX_K,
    ROWS_CONFIG,
    TRANSPOSED_CONFIG,
    CuteConvRowsBuilder,
    CuteConvTransposedBuilder,
    rows_reason,
    transposed_reason,
    transposed_view,
)
from sigdnn.registry.regions import Dataflow


def test_the_view_is_the_implicit_one_read_column_major_with_the_bias_by_row() -> None:
    g = chain_graph()  # K = 24
    chain = epilogue_chain(g, Dataflow(g, list(range(len(g.nodes)))), 0)
    plain = plan_conv(g.node_by_name("conv"), g, chain)
    view = CuteConvTransposedBuilder().plan(g.node_by_name("conv"), g, chain)
    assert view.geometry == plain.geometry
    assert (view.spec.c_major, view.spec.bias_per) == ("m", "m")
    assert (plain.spec.c_major, plain.spec.bias_per) == ("n", "n")
    assert view.spec.bias_dtype == plain.spec.bias_dtype and view.spec.activation == plain.spec.activation
    assert transposed_view(plain) == view


@pytest.mark.parametrize(("k", "taken"), [(8, True), (MAX_K, True), (MAX_K + 8, False), (128, False)])
def test_it_takes_up_to_64_output_channels(k: int, taken: bool) -> None:
    g = conv_graph((2, 32, 9, 11), (k, 32, 3, 3), padding=(1, 1))
    view = plan_conv(g.node_by_name("conv"), g)
    assert (transposed_reason(view) is None) == taken
    if not taken:
        with pytest.raises(NotSupported, match=f"{k} output channels; the transposed conv takes up to 64"):
            CuteConvTransposedBuilder().check(g.node_by_name("conv"), g, None)


def test_it_declines_3d() -> None:
    g = conv_graph((2, 16, 4, 6, 5), (32, 16, 3, 3, 3), layout="NDHWC", padding=(1, 1, 1))
    with pytest.raises(NotSupported, match="3-D convolution; the transposed conv takes 2-D"):
        CuteConvTransposedBuilder().plan(g.node_by_name("conv"), g)


def test_it_ranks_above_the_implicit_builder_with_one_pingpong_config() -> None:
    builder = CuteConvTransposedBuilder()
    assert builder.priority > CuteConvImplicitBuilder.priority and builder.engine_id == 3007
    assert (TRANSPOSED_CONFIG.tile_m, TRANSPOSED_CONFIG.tile_n, TRANSPOSED_CONFIG.pingpong) == (64, 256, True)
    g = conv_graph((2, 64, 9, 11), (64, 64, 3, 3), padding=(1, 1))
    assert builder.configs([g.node_by_name("conv")], g) == ["pp64x256c1x1s1"]


def test_the_row_conv_takes_resnet_conv2_3x3_and_its_limits() -> None:
    for x_dims, w_dims in [
        ((64, 64, 56, 56), (64, 64, 3, 3)),
        ((1, 64, 4, 62), (8, 64, 3, 3)),
        ((2, 64, 8, 1), (64, 64, 3, 3)),
    ]:
        g = conv_graph(x_dims, w_dims, padding=(1, 1))
        view = CuteConvRowsBuilder().plan(g.node_by_name("conv"), g)
        assert view == transposed_view(plan_conv(g.node_by_name("conv"), g))


@pytest.mark.parametrize(
    ("x_dims", "w_dims", "conv", "match"),
    [
        ((2, 64, 8, 8), (72, 64, 3, 3), {"padding": (1, 1)}, "72 output channels"),  # the transposed conv's own
        (
            (2, 128, 8, 8),
            (64, 128, 3, 3),
            {"padding": (1, 1)},
            "128 input channels, a 3x3 filter; the row conv takes 64 channels",
        ),
        ((2, 64, 8, 8), (64, 64, 1, 1), {}, "64 input channels, a 1x1 filter"),
        ((2, 64, 8, 8), (64, 64, 3, 3), {"padding": (1, 1), "stride": (2, 2)}, "unit stride"),
        ((2, 64, 8, 8), (64, 64, 3, 3), {"padding": (1, 1), "dilation": (1, 2)}, "unit stride and dilation"),
        ((2, 64, 8, 8), (64, 64, 3, 3), {"pre_padding": (1, 1), "post_padding": (0, 1)}, "'conv': padding, stride or"),
        ((2, 64, 8, 63), (64, 64, 3, 3), {"padding": (1, 1)}, "8 x 63 output pixels"),
        (
            (2, 64, 6, 8),
            (64, 64, 3, 3),
            {"padding": (1, 1)},
            "6 x 8 output pixels; the row conv takes rows of up to 62, a multiple of 4",
        ),
    ],
)
def test_the_row_conv_declines_what_four_rows_of_62_pixels_cannot_hold(x_dims, w_dims, conv, match) -> None:
    g = conv_graph(x_dims, w_dims, **conv)
    with pytest.raises(NotSupported, match=match):
        CuteConvRowsBuilder().check(g.node_by_name("conv"), g, None)
    assert rows_reason(plan_conv(g.node_by_name("conv"), g)) is not None


def test_the_row_conv_ranks_first_with_its_one_config() -> None:
    builder = CuteConvRowsBuilder()
    assert builder.priority > CuteConvTransposedBuilder.priority and builder.engine_id == 3008
    assert ROWS_CONFIG.label == "pp64x256c1x1s1"
    g = conv_graph((2, 64, 8, 9), (64, 64, 3, 3), padding=(1, 1))
    assert builder.configs([g.node_by_name("conv")], g) == [ROWS_CONFIG.label]


def test_each_builder_names_a_kernel_the_launch_table_has() -> None:
    """The builders' kinds are keys of kernels/conv_launch.KINDS (read from its source: importing it needs the DSL)."""
    import sigdnn.plan_builders.cute.kernels as kernels

    tree = ast.parse((Path(kernels.__file__).parent / "conv_launch.py").read_text())
    table = next(n.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "KINDS")
    kinds = {ast.literal_eval(key) for key in table.keys}
    for builder in (CuteConvTransposedBuilder, CuteConvRowsBuilder):
        assert (builder.kind, 2) in kinds
    assert CuteConvTransposedBuilder.kind != CuteConvRowsBuilder.kind
