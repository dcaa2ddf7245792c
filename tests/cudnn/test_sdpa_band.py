"""pygraph's diagonal-band keywords on sigdnn (CPU handle), against torch's float64 attention with the mask the
cuDNN-frontend documentation describes: use_causal_mask_bottom_right (a key cache: the last query row faces the
last key), sliding_window_length / diagonal_band_left_bound (the window's length), diagonal_band_right_bound and
diagonal_alignment; and the pygraph's refusals of a band given twice."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

import sigdnn.cudnn as cudnn
from sigdnn.errors import GraphError
from tests.cudnn.conftest import close, run

B, H, SQ, SKV, D = 2, 2, 3, 7, 4


SEEDED = torch.Generator().manual_seed(3)


def rand(*dims: int) -> torch.Tensor:
    return torch.randn(*dims, dtype=torch.float64, generator=SEEDED)


def band_mask(bottom_right: bool, left: int | None, right: int | None, sq: int = SQ, skv: int = SKV) -> torch.Tensor:
    """[Sq, Skv] True where key j is visible to query i: i + a - left < j <= i + a + right, a = Skv - Sq or 0."""
    a = skv - sq if bottom_right else 0
    i, j = torch.arange(sq)[:, None], torch.arange(skv)[None, :]
    keep = torch.ones(sq, skv, dtype=torch.bool)
    if right is not None:
        keep &= j <= i + a + right
    if left is not None:
        keep &= i + a - left < j
    return keep


KEYWORDS = {
    "use_causal_mask_bottom_right": ({"use_causal_mask_bottom_right": True}, (True, None, 0)),
    "sliding_window_length": ({"use_causal_mask": True, "sliding_window_length": 2}, (False, 2, 0)),
    "bottom_right_window": (
        {"use_causal_mask_bottom_right": True, "diagonal_band_left_bound": 3},
        (True, 3, 0),
    ),
    "band_and_alignment": (
        {
            "diagonal_alignment": cudnn.diagonal_alignment.BOTTOM_RIGHT,
            "diagonal_band_left_bound": 2,
            "diagonal_band_right_bound": 1,
        },
        (True, 2, 1),
    ),
}


@pytest.mark.parametrize("name", list(KEYWORDS))
def test_band_keywords_match_torch_forward_and_backward(graph, name: str) -> None:
    keywords, (bottom_right, left, right) = KEYWORDS[name]
    q, k, v, do = rand(B, H, SQ, D), rand(B, H, SKV, D), rand(B, H, SKV, D), rand(B, H, SQ, D)
    scale = 1 / math.sqrt(D)
    Q, K, V, DO = (graph.tensor_like(t) for t in (q, k, v, do))
    O_, STATS = graph.sdpa(q=Q, k=K, v=V, attn_scale=scale, generate_stats=True, **keywords)
    STATS.set_data_type(cudnn.data_type.DOUBLE)
    DQ, DK, DV = graph.sdpa_backward(q=Q, k=K, v=V, o=O_, dO=DO, stats=STATS, attn_scale=scale, **keywords)
    o, dq, dk, dv = run(graph, {Q: q, K: k, V: v, DO: do}, [O_, DQ, DK, DV])
    mask = band_mask(bottom_right, left, right)
    assert mask.any(-1).all() and not mask.all()  # every row sees a key, and the band hides some
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    expect = F.scaled_dot_product_attention(*leaves, attn_mask=mask, scale=scale)
    expect.backward(do)
    close(o, expect.detach())
    for got, leaf in zip((dq, dk, dv), leaves):
        close(got, leaf.grad)


@pytest.mark.parametrize(
    "keywords",
    [
        {"use_causal_mask": True, "use_causal_mask_bottom_right": True},
        {"use_causal_mask": True, "diagonal_band_right_bound": 2},
        {"use_causal_mask_bottom_right": True, "diagonal_band_right_bound": 0},
        {"sliding_window_length": 2, "diagonal_band_left_bound": 2},
        {"diagonal_alignment": "BOTTOM_RIGHT", "diagonal_band_right_bound": 0},
    ],
)
def test_a_band_given_twice_or_misspelled_is_refused(graph, keywords: dict) -> None:
    Q = graph.tensor_like(rand(B, H, SQ, D))
    with pytest.raises(GraphError, match=r"cannot both|must be a cudnn\.diagonal_alignment, got 'BOTTOM_RIGHT'"):
        graph.sdpa(q=Q, k=Q, v=Q, generate_stats=False, **keywords)


def test_a_band_round_trips_through_cudnn_json(graph) -> None:
    """serialize() writes the band as cuDNN's JSON fields (left_bound, right_bound, diagonal_alignment) and a
    deserialized graph computes the same, bit for bit."""
    q, k, v = rand(B, H, SQ, D), rand(B, H, SKV, D), rand(B, H, SKV, D)
    Q, K, V = (graph.tensor_like(t) for t in (q, k, v))
    keywords = {"use_causal_mask_bottom_right": True, "sliding_window_length": 3}
    O_, _ = graph.sdpa(q=Q, k=K, v=V, attn_scale=0.5, generate_stats=False, **keywords)
    (first,) = run(graph, {Q: q, K: k, V: v}, [O_])
    data = graph.serialize()
    (node,) = [n for n in json.loads(data)["nodes"] if n["tag"] == "SDPA"]
    assert (node["left_bound"], node["right_bound"], node["diagonal_alignment"]) == (3, 0, "BOTTOM_RIGHT")
    again = cudnn.pygraph(handle=cudnn.create_handle(device="cpu"))
    again.deserialize(data)
    second = torch.empty_strided(O_.get_dim(), O_.get_stride(), dtype=torch.float64)
    again.execute({Q.get_uid(): q, K.get_uid(): k, V.get_uid(): v, O_.get_uid(): second}, None)
    assert torch.equal(first, second)
