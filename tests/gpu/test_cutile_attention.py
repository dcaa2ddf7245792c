"""cuTile attention forward on the GPU: the emulator's cases (tests/plan_builders/cutile/test_emulated_attention.py)
compiled by cuTile, plus attention at transformer sizes the CuTe flash attention declines (float32; head dim
80), each through sigdnn.validate."""

from __future__ import annotations

import pytest
from attention_cases import CASES, Case, backward_graph, consistent_backward_inputs, graph

import sigdnn
from sigdnn.accuracy.inputs import random_inputs

pytestmark = pytest.mark.gpu

BUILDER = "cutile.sdpa"


CASES_AT_SIZE = [*CASES, Case("f32_d80_seq1024", 2, 8, 8, 1024, 1024, 80, 80, "float32", True, True),
                 Case("bf16_d80_gqa_seq2048", 1, 16, 4, 2048, 2048, 80, 80, "bfloat16", True, False, bshd=True)]  # fmt: skip


@pytest.mark.parametrize("case", CASES_AT_SIZE, ids=lambda c: c.name)
def test_attention_matches_the_reference_on_the_gpu(case: Case) -> None:
    g = graph(case)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=sigdnn.Executor("gpu"))
    assert set(report.builders.values()) == {BUILDER}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize("case", CASES_AT_SIZE, ids=lambda c: c.name)
def test_attention_backward_matches_the_reference_on_the_gpu(case: Case) -> None:
    g = backward_graph(case)
    report = sigdnn.validate(g, consistent_backward_inputs(case, seed=3), executor=sigdnn.Executor("gpu"))
    assert set(report.builders.values()) == {"cutile.sdpa_backward"}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize("shift", [0, 3], ids=["rows", "off_rows"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize(("causal", "dtype"), [(False, "float32"), (True, "bfloat16")], ids=["full_f32", "causal_bf16"])
def test_ragged_attention_matches_the_reference_on_the_gpu(
    backward: bool, causal: bool, dtype: str, shift: int
) -> None:
    """Token-packed sequences (a full one, a single query, one with no key): the emulator's case, compiled; from
    element 0 (moved as slices of rows) and from element 3 (off every row: gathered)."""
    from ragged_attention_cases import arrays, graph_inputs, ragged_graph

    g = ragged_graph(backward, causal, dtype)
    data = arrays(causal, dtype, shift=shift)[0]
    report = sigdnn.validate(g, graph_inputs(g, data), executor=sigdnn.Executor("gpu"))
    assert set(report.builders.values()) == {"cutile.sdpa_backward" if backward else BUILDER}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize("band", [{}, {"diagonal_bottom_right": True, "left_bound": 257}], ids=["causal", "window"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_ragged_attention_of_mixed_lengths_at_size(backward: bool, band: dict) -> None:
    """8 sequences of validation's random lengths up to 600 tokens, bf16, GQA, head dim 128, causal; and a
    sliding window of 257 keys through each sequence's last key (flash-attention's varlen window)."""
    from ragged_attention_cases import bshd

    g = sigdnn.Graph("ragged_at_size", io_dtype="bfloat16", compute_dtype="float32")
    shapes = {"q": (8, 8, 600, 128), "k": (8, 2, 600, 128), "v": (8, 2, 600, 128), "o": (8, 8, 600, 128)}
    q, k, v = (g.tensor(p, shapes[p], strides=bshd(shapes[p])) for p in "qkv")
    lengths = {n: g.tensor(n, (8,), dtype="int32") for n in ("seq_len_q", "seq_len_kv")}
    offs = {p: g.tensor(f"{p}_off", (9,), dtype="int32") for p in "qkvo"}
    varlen = {**lengths, "ragged_offsets": offs, **band}
    if backward:
        o, do = (g.tensor(n, shapes["o"], strides=bshd(shapes["o"])) for n in ("o", "d_o"))
        stats = g.tensor("stats", (8, 8, 600, 1), dtype="float32")
        for t in g.sdpa_backward(q, k, v, o, do, stats, 128**-0.5, None, True, name="bwd", **varlen):
            t.set_output(True)
    else:
        g.sdpa(q, k, v, 128**-0.5, None, True, name="sdpa", **varlen)[0].set_output(True)
    report = sigdnn.validate(g, random_inputs(g, seed=11), executor=sigdnn.Executor("gpu"))
    assert set(report.builders.values()) == {"cutile.sdpa_backward" if backward else BUILDER}, report.builders
    assert report.passed, report.table()
