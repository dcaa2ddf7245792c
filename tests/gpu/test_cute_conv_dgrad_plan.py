"""How the CuTe dgrad builder turns a conv dgrad into a conv fprop over dy (pure Python, no GPU)."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.conv_dgrad import CuteConvDgradBuilder, inserted_extent, plan_dgrad


def dgrad_graph(dy_dims=(2, 24, 9, 11), w_dims=(24, 16, 3, 3), *, dtype="bfloat16", layout="NHWC", **conv):
    g = sigdnn.Graph("dgrad", io_dtype=dtype, compute_dtype="float32")
    dy = g.tensor("dy", dy_dims, layout=layout)
    w = g.tensor("w", w_dims, layout=layout)
    g.conv_dgrad(dy, w, name="dgrad", **conv).set_output(True).set_name("dx")
    return g


def test_padding_becomes_the_flipped_filters_reach_minus_the_padding() -> None:
    g = dgrad_graph((3, 16, 10, 9), (16, 8, 3, 3), pre_padding=(1, 2), post_padding=(0, 1), dilation=(2, 2))
    h, w = g.tensor_by_name("dx").dims[2:]
    view = plan_dgrad(g.node_by_name("dgrad"), g)
    # fprop over dy: (n, P, Q, K in, C out, R, S, H, W, pads (reach 4 - padding), stride 1, dilation)
    assert view.geometry == (3, 10, 9, 16, 8, 3, 3, h, w, 3, 2, 4, 3, 1, 1, 2, 2)
    assert (h, w) == (10 + 4 - 1 - 0, 9 + 4 - 2 - 1)


def test_a_strided_dgrad_reads_dy_with_zeros_inserted() -> None:
    g = dgrad_graph(padding=(1, 1), stride=(2, 2), dims=(2, 16, 18, 22))  # dy 9 x 11
    view = plan_dgrad(g.node_by_name("dgrad"), g)
    # dy becomes 17 x 21; after it, padding so that the fprop's output is dx's 18 x 22: 18 - 17 + 1.
    assert view.geometry == (2, 17, 21, 24, 16, 3, 3, 18, 22, 1, 1, 2, 2, 1, 1, 1, 1)
    assert inserted_extent(9, 2) == 17 and inserted_extent(5, 3) == 13 and inserted_extent(4, 1) == 4


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"padding": (3, 1)}, "beyond the filter's reach"),
        ({"layout": "NCHW"}, "channels-last"),
        ({"dy_dims": (2, 12, 9, 11), "w_dims": (12, 16, 3, 3)}, "multiples of 8"),  # dy's 12 channels
        ({"dtype": "float32"}, "dtypes"),
    ],
)
def test_what_the_builder_declines(kw: dict, match: str) -> None:
    conv = {"padding": (1, 1), **{k: v for k, v in kw.items() if k in ("stride", "padding", "dims")}}
    rest = {k: v for k, v in kw.items() if k not in conv}
    g = dgrad_graph(**rest, **conv)
    with pytest.raises(NotSupported, match=match):
        CuteConvDgradBuilder().check(g.node_by_name("dgrad"), g, None)
