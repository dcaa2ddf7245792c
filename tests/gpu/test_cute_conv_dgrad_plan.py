"""How the CuTe dgrad builder turns a conv dgrad into conv fprops over dy (pure Python, no GPU)."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.conv_dgrad import CuteConvDgradBuilder, PhasedDgrad, plan_dgrad


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


def test_a_strided_dgrad_runs_one_stride_1_fprop_per_phase() -> None:
    g = dgrad_graph(padding=(1, 1), stride=(2, 2), dims=(2, 16, 18, 22))  # dy 9 x 11
    plan = plan_dgrad(g.node_by_name("dgrad"), g)
    assert isinstance(plan, PhasedDgrad)
    # Phase (p, q) over dy: taps 1 (p = 0) or 2 (p = 1) per axis, outputs 9 x 11, padding 1 after a 2-tap axis.
    assert [v.geometry for v in plan.views] == [
        (2, 9, 11, 24, 16, 1, 1, 9, 11, 0, 0, 0, 0, 1, 1, 1, 1),
        (2, 9, 11, 24, 16, 1, 2, 9, 11, 0, 0, 0, 1, 1, 1, 1, 1),
        (2, 9, 11, 24, 16, 2, 1, 9, 11, 0, 0, 1, 0, 1, 1, 1, 1),
        (2, 9, 11, 24, 16, 2, 2, 9, 11, 0, 0, 1, 1, 1, 1, 1, 1),
    ]
    # Sub-filters (16 x taps x 24 bf16), then outputs (2 x 9 x 11 x 16 bf16), each 256-byte aligned.
    assert plan.layout.filters == (0, 768, 2304, 3840)
    assert plan.layout.outputs == (6912, 13312, 19712, 26112)  # 6336 bytes each, 6400 aligned
    assert plan.layout.workspace_bytes == 32512


def test_a_1x1_stride_2_dgrad_runs_one_phase_of_four() -> None:
    g = dgrad_graph((2, 128, 7, 7), (128, 64, 1, 1), stride=(2, 2), dims=(2, 64, 14, 14))
    plan = plan_dgrad(g.node_by_name("dgrad"), g)
    assert [v is not None for v in plan.convs] == [True, False, False, False]
    assert plan.layout.interleave[3:] == (-1, 7, 7) * 3  # the interleave writes zeros there


STRIDED_12_CHANNELS = {"stride": (2, 2), "dims": (2, 16, 18, 22), "dy_dims": (2, 12, 9, 11), "w_dims": (12, 16, 3, 3)}


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"padding": (3, 1)}, "beyond the filter's reach"),
        ({"layout": "NCHW"}, "channels-last"),
        ({"dy_dims": (2, 12, 9, 11), "w_dims": (12, 16, 3, 3)}, "multiples of 8"),  # dy's 12 channels
        ({"dtype": "float32"}, "dtypes"),
        (STRIDED_12_CHANNELS, "stride phase 0, 0.*multiples of 8"),
    ],
)
def test_what_the_builder_declines(kw: dict, match: str) -> None:
    conv = {"padding": (1, 1), **{k: v for k, v in kw.items() if k in ("stride", "padding", "dims")}}
    rest = {k: v for k, v in kw.items() if k not in conv}
    g = dgrad_graph(**rest, **conv)
    with pytest.raises(NotSupported, match=match):
        CuteConvDgradBuilder().check(g.node_by_name("dgrad"), g, None)
