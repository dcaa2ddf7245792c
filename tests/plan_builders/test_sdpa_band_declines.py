"""The CuTe flash attention masks by nothing or the top-left causal mask: a node with any other diagonal band is
declined by it, naming the band, and taken by the cuTile attention, which masks every band (its cases:
tests/plan_builders/cutile/test_emulated_attention.py), so a GPU executor runs it masked; a bottom-right alignment
that lands on the top-left diagonal (no padding, Sq == Skv) is still taken by the CuTe kernel."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.attention import band_beyond_causal
from sigdnn.plan_builders.cute.sdpa import CuteSdpaBuilder
from sigdnn.plan_builders.cute.sdpa_backward import CuteSdpaBackwardBuilder
from sigdnn.plan_builders.cutile.attention import CutileSdpaBackwardBuilder, CutileSdpaBuilder


def attention(backward: bool, sq: int = 64, causal: bool = True, **band: object) -> sigdnn.Graph:
    g = sigdnn.Graph("attn", io_dtype="bfloat16", compute_dtype="float32")
    q = g.tensor("q", (2, 4, sq, 128))
    k, v = g.tensor("k", (2, 4, 64, 128)), g.tensor("v", (2, 4, 64, 128))
    if backward:
        o, do = g.tensor("o", (2, 4, sq, 128)), g.tensor("do", (2, 4, sq, 128))
        st = g.tensor("st", (2, 4, sq, 1), dtype="float32")
        for t in g.sdpa_backward(q, k, v, o, do, st, 0.1, None, causal, name="sdpa", **band):
            t.set_output(True)
    else:
        g.sdpa(q, k, v, 0.1, None, causal, name="sdpa", **band)[0].set_output(True)
    return g


DECLINED = {
    "window": ({"left_bound": 8}, 64, "left_bound 8, right_bound 0, top-left aligned"),
    "bottom_right_decoding": ({"diagonal_bottom_right": True}, 16, "left_bound None, right_bound 0, bottom-right"),
}


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", ["window", "bottom_right_decoding"])
def test_a_band_beyond_the_causal_mask_goes_past_the_cute_kernel_to_cutile(name: str, backward: bool) -> None:
    band, sq, described = DECLINED[name]
    g = attention(backward, sq, **band)
    node = g.node_by_name("sdpa")
    assert band_beyond_causal(node, g).startswith(described)
    cute = CuteSdpaBackwardBuilder() if backward else CuteSdpaBuilder()
    with pytest.raises(NotSupported, match=rf"node 'sdpa': the diagonal band \({described}.*not supported by the CuTe"):
        cute.plan(node, g)
    (CutileSdpaBackwardBuilder() if backward else CutileSdpaBuilder()).check(node, g)


@pytest.mark.parametrize(
    ("band", "sq", "causal"),
    [
        ({}, 64, False),
        ({}, 64, True),
        ({"diagonal_bottom_right": True}, 64, True),  # Sq == Skv, no padding: the top-left diagonal
        ({"diagonal_bottom_right": True}, 16, False),  # an alignment with no bound hides nothing
        ({"right_bound": 3}, 64, True),  # the causal mask inside a wider right bound
    ],
    ids=["none", "causal", "bottom_right_square", "alignment_alone", "causal_in_wider_bound"],
)
def test_what_the_kernels_mask_alike_is_taken(band: dict, sq: int, causal: bool) -> None:
    for backward in (False, True):
        g = attention(backward, sq, causal, **band)
        node = g.node_by_name("sdpa")
        assert band_beyond_causal(node, g) is None
        (CuteSdpaBackwardBuilder() if backward else CuteSdpaBuilder()).plan(node, g)


def test_a_bottom_right_causal_mask_with_padding_is_declined() -> None:
    """Lengths shift the bottom-right diagonal per sequence, which the kernels' top-left one is not."""
    g = sigdnn.Graph("attn", io_dtype="bfloat16", compute_dtype="float32")
    q, k, v = (g.tensor(n, (2, 4, 64, 128)) for n in ("q", "k", "v"))
    lq = g.tensor("lq", (2, 1, 1, 1), dtype="int32")
    g.sdpa(q, k, v, 0.1, None, True, seq_len_q=lq, diagonal_bottom_right=True, name="sdpa")[0].set_output(True)
    assert band_beyond_causal(g.node_by_name("sdpa"), g) == "left_bound None, right_bound 0, bottom-right aligned"


@pytest.mark.parametrize(
    ("band", "causal", "masked"),
    [
        ({}, False, False),
        ({}, True, True),
        ({"right_bound": 0}, False, True),
        ({"diagonal_bottom_right": True}, False, False),
    ],
)
def test_the_kernels_causal_flag_reads_a_right_bound_of_zero_as_causal(band: dict, causal: bool, masked: bool) -> None:
    """A graph may spell the causal mask as right_bound 0 (cuDNN's JSON and pygraph do): the kernels mask it."""
    from sigdnn.plan_builders.cute.attention import causal_mask

    g = attention(False, 64, causal, **band)
    assert causal_mask(g.node_by_name("sdpa").op) is masked
