"""sdpa / sdpa_backward under a diagonal band (left and right bounds, top-left or bottom-right alignment), against
torch in float64 with a mask written out from the definition, key by key.

The oracle's mask is a loop over (batch, row, key): key j is visible to row
i when i < Sq_b, j < Skv_b, i + a - left < j (a left bound) and j <= i + a +
right (a right bound; the causal mask is right 0), a = Skv_b - Sq_b under
bottom-right alignment, else 0. Its softmax keeps a row with no visible key
at p = 0 (the module's rule: o = 0, stats = -inf, no gradient) without the
NaN torch's own masked softmax gives there.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from math_oracles import import_torch

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.graph.ops.sdpa import Band
from sigdnn.plan_builders.reference.math import sdpa, sdpa_backward

torch = import_torch()

B, HQ, HKV, D, DV = 3, 4, 2, 3, 2
SCALE = 0.7


def mask_by_loops(sq, skv, lq, lkv, causal, bottom_right, left, right) -> np.ndarray:
    """Bool [B, 1, Sq, Skv]: True where key j is visible to row i of batch b."""
    visible = np.zeros((B, 1, sq, skv), dtype=bool)
    for b in range(B):
        a = lkv[b] - lq[b] if bottom_right else 0
        for i in range(sq):
            for j in range(skv):
                ok = i < lq[b] and j < lkv[b]
                ok = ok and (not causal or j <= i + a)
                ok = ok and (right is None or j <= i + a + right)
                ok = ok and (left is None or i + a - left < j)
                visible[b, 0, i, j] = ok
    return visible


def oracle(q, k, v, do, visible):
    """torch float64: o, stats, dq, dk, dv with the mask ``visible``."""
    qt, kt, vt = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    ke, ve = kt.repeat_interleave(HQ // HKV, 1), vt.repeat_interleave(HQ // HKV, 1)
    mask = torch.tensor(visible)
    s = (SCALE * qt @ ke.transpose(-1, -2)).masked_fill(~mask, -math.inf)
    seen = mask.any(-1, keepdim=True)
    p = torch.softmax(torch.where(seen, s, 0.0), -1) * seen
    o = p @ ve
    o.backward(torch.tensor(do))
    stats = torch.logsumexp(s, -1, keepdim=True)
    return o.detach().numpy(), stats.detach().numpy(), qt.grad.numpy(), kt.grad.numpy(), vt.grad.numpy()


CASES = {
    # name: (Sq, Skv, seq_len_q, seq_len_kv, causal, Band)
    "bottom_right_causal_decoding": (4, 7, None, None, True, Band(bottom_right=True)),
    "bottom_right_causal_per_sequence": (4, 7, [4, 2, 3], [7, 5, 3], True, Band(bottom_right=True)),
    "bottom_right_causal_more_queries": (6, 4, None, None, True, Band(bottom_right=True)),  # two rows see nothing
    "sliding_window": (7, 7, None, None, True, Band(left=3)),
    "sliding_window_bottom_right_padded": (3, 8, None, [8, 4, 3], True, Band(bottom_right=True, left=2)),
    "band_around_the_diagonal": (6, 6, None, None, False, Band(left=2, right=1)),
    "negative_right_bound": (5, 5, [5, 3, 1], None, False, Band(right=-1)),  # row 0 sees nothing
    "right_bound_wider_than_causal": (5, 5, None, None, True, Band(right=2)),  # the causal mask wins
    "alignment_alone": (4, 7, None, None, False, Band(bottom_right=True)),  # no bound: nothing hidden
}


@pytest.mark.parametrize("name", list(CASES))
def test_band_matches_torch_with_a_mask_written_key_by_key(name: str) -> None:
    sq, skv, lq, lkv, causal, band = CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    q, k = rng.standard_normal((B, HQ, sq, D)), rng.standard_normal((B, HKV, skv, D))
    v, do = rng.standard_normal((B, HKV, skv, DV)), rng.standard_normal((B, HQ, sq, DV))
    lq_ = np.array(lq) if lq is not None else np.full(B, sq)
    lkv_ = np.array(lkv) if lkv is not None else np.full(B, skv)
    visible = mask_by_loops(sq, skv, lq_, lkv_, causal, band.bottom_right, band.left, band.right)
    want_o, want_stats, want_dq, want_dk, want_dv = oracle(q, k, v, do, visible)
    lengths = {"seq_len_q": None if lq is None else np.array(lq, np.int32),
               "seq_len_kv": None if lkv is None else np.array(lkv, np.int32)}  # fmt: skip
    o, stats = sdpa(q, k, v, SCALE, None, causal, True, band=band, **lengths)
    np.testing.assert_allclose(o, want_o, rtol=1e-12, atol=1e-13)
    np.testing.assert_array_equal(np.isneginf(stats), np.isneginf(want_stats))
    finite = np.isfinite(want_stats)
    np.testing.assert_allclose(stats[finite], want_stats[finite], rtol=1e-12)
    dq, dk, dv = sdpa_backward(q, k, v, o, do, stats, SCALE, None, causal, band=band, **lengths)
    for got, want in ((dq, want_dq), (dk, want_dk), (dv, want_dv)):
        np.testing.assert_allclose(got, want, rtol=1e-11, atol=1e-12)


def test_the_cases_hide_keys_the_causal_mask_alone_does_not() -> None:
    """Every banded case's mask differs from the plain causal (or unmasked) one: none passes by accident."""
    for name, (sq, skv, lq, lkv, causal, band) in CASES.items():
        lq_ = np.array(lq) if lq is not None else np.full(B, sq)
        lkv_ = np.array(lkv) if lkv is not None else np.full(B, skv)
        banded = mask_by_loops(sq, skv, lq_, lkv_, causal, band.bottom_right, band.left, band.right)
        plain = mask_by_loops(sq, skv, lq_, lkv_, causal, False, None, None)
        assert (banded != plain).any() == (name not in ("right_bound_wider_than_causal", "alignment_alone")), name


def test_band_of_folds_the_causal_mask_into_the_right_bound() -> None:
    assert Band(right=3).with_causal(True) == Band(right=0)
    assert Band(right=-2).with_causal(True) == Band(right=-2)
    assert Band(True, 4, None).with_causal(True) == Band(True, 4, 0)
    assert Band(left=4).with_causal(False) == Band(left=4)
    assert not Band(bottom_right=True).masks and Band(left=1).masks and Band(right=5).masks


def band_graph(backward: bool = True, **band: object) -> sigdnn.Graph:
    g = sigdnn.Graph("band", io_dtype="float64", compute_dtype="float64")
    q, k, v = g.tensor("q", (B, HQ, 4, D)), g.tensor("k", (B, HKV, 7, D)), g.tensor("v", (B, HKV, 7, DV))
    o, stats = g.sdpa(q, k, v, SCALE, use_causal_mask=True, generate_stats=True, name="attention", **band)
    o.set_output(True).set_name("o")
    stats.set_output(True).set_name("stats")
    if not backward:
        return g
    d_o = g.tensor("d_o", (B, HQ, 4, DV))
    grads = g.sdpa_backward(q, k, v, o, d_o, stats, SCALE, use_causal_mask=True, name="attention_bwd", **band)
    for t, name in zip(grads, ("dq", "dk", "dv")):
        t.set_output(True).set_name(name)
    return g


def test_the_graph_runs_the_band_it_was_given_and_keeps_it_on_the_wire() -> None:
    """Executor("reference") on a serialized and read-back graph equals the math with the same band."""
    g = sigdnn.deserialize(sigdnn.serialize(band_graph(diagonal_bottom_right=True, left_bound=2)))
    op = g.node_by_name("attention").op
    assert (op.diagonal_bottom_right, op.left_bound, op.right_bound) == (True, 2, None)
    assert g.node_by_name("attention_bwd").op.left_bound == 2
    rng = np.random.default_rng(5)
    data = {t.name: rng.standard_normal(t.dims) for t in g.inputs}
    got = sigdnn.Executor("reference").run(g, data)
    band = Band(bottom_right=True, left=2)
    o, stats = sdpa(data["q"], data["k"], data["v"], SCALE, None, True, True, band=band)
    np.testing.assert_array_equal(got["o"], o)
    np.testing.assert_array_equal(got["stats"], stats.astype(np.float32))  # (stats are float32 unless set)
    q, k, v = data["q"], data["k"], data["v"]
    dq, _, _ = sdpa_backward(q, k, v, got["o"], data["d_o"], got["stats"], SCALE, None, True, band=band)
    np.testing.assert_array_equal(got["dq"], dq)


def test_the_band_is_part_of_the_signature_key() -> None:
    from sigdnn.signature_keys import key_for

    keys = set()
    for band in ({}, {"diagonal_bottom_right": True}, {"left_bound": 3}, {"right_bound": 1}):
        g = band_graph(**band)
        keys.add(key_for(g.node_by_name("attention"), g))
    assert len(keys) == 4


@pytest.mark.parametrize(
    ("band", "message"),
    [
        ({"left_bound": 0}, "left_bound 0; a window holds at least"),
        ({"left_bound": -3}, "left_bound -3"),
        ({"right_bound": 2**31}, "right_bound 2147483648 is outside"),
        ({"left_bound": -(2**31)}, r"left_bound -2147483648 is outside \(-2\^31, 2\^31\)"),
    ],
)
@pytest.mark.parametrize("backward", [False, True], ids=["sdpa", "sdpa_backward"])
def test_bounds_outside_their_range_are_refused_naming_the_node(band: dict, message: str, backward: bool) -> None:
    """Each op checks its own band: the forward alone, and the backward after a valid forward."""
    if backward:
        g = band_graph()
        with pytest.raises(GraphError, match=rf"sdpa_backward '[^']+': {message}"):
            g.sdpa_backward(
                *(g.tensor_by_name(n) for n in ("q", "k", "v", "o", "d_o", "stats")), SCALE, name="b", **band
            )
        return
    with pytest.raises(GraphError, match=rf"sdpa '[^']+': {message}"):
        band_graph(backward=False, **band)


def test_a_bound_that_is_not_an_integer_is_refused() -> None:
    with pytest.raises(GraphError, match="left_bound"):
        band_graph(left_bound=2.5)


def test_a_block_multiplies_only_by_the_keys_its_rows_can_see() -> None:
    """The module's work bound: rows 0-2 of 10 keys under the causal mask need keys 0-2, under a right bound 2
    keys 0-4, -1 keys 0-1; bottom-right, the block's largest shift Skv_b - Sq_b moves that bound; padding past
    the block's longest key sequence is never multiplied; at least one key."""
    from sigdnn.plan_builders.reference.math.sdpa import _Block, _Masks

    blk = _Block(slice(0, 2), slice(0, 1), slice(0, 1), slice(0, 3))
    for band, keys in ((Band(right=0), 3), (Band(right=2), 5), (Band(right=20), 10), (Band(right=-1), 2),
                       (Band(right=-3), 1), (Band(bottom_right=True, right=0), 10), (Band(left=2), 10),
                       (Band(), 10)):  # fmt: skip
        assert _Masks(band, None, None, 3, 10).keys(blk, 10) == keys, band
    lq, lkv = np.array([3, 1, 3]), np.array([6, 2, 9])  # the block holds batches 0 and 1: shifts 3 and 1
    assert _Masks(Band(bottom_right=True, right=0), lq, lkv, 3, 10).keys(blk, 10) == 6  # 3 rows + 3
    assert _Masks(Band(bottom_right=True, right=-2), lq, lkv, 3, 10).keys(blk, 10) == 4  # 3 rows + 3 - 2
    assert _Masks(Band(right=0), lq, lkv, 3, 10).keys(blk, 10) == 3
    assert _Masks(Band(left=1), lq, lkv, 3, 10).keys(blk, 10) == 6  # the longest of 6 and 2 keys
    assert _Masks(Band(), lq, np.array([0, 0, 9]), 3, 10).keys(blk, 10) == 1
