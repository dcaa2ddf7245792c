"""cuTile attention on the GPU: the emulator's cases (tests/plan_builders/cutile/test_emulated_attention.py)
compiled by cuTile, plus attention at transformer sizes the CuTe flash attention declines (float32; head dim
80), each through sigdnn.validate; and ragged (token-packed) attention both ways the builder reads it (in
place, and through padded copies), with the in-place path's sequences around the tile, gaps between them,
its output buffers written exactly inside the sequences and hostile offsets
(tests/plan_builders/cutile/test_emulated_ragged_in_place.py's cases)."""

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


@pytest.mark.parametrize("layout", ["in_place", "unpacked"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize(("causal", "dtype"), [(False, "float32"), (True, "bfloat16")], ids=["full_f32", "causal_bf16"])
def test_ragged_attention_matches_the_reference_on_the_gpu(
    backward: bool, causal: bool, dtype: str, layout: str
) -> None:
    """Token-packed sequences (a full one, a single query, one with no key): the emulator's case, compiled; BSHD
    (read in place) and with a strided head dim (unpacked into padded copies)."""
    from ragged_attention_cases import arrays, bseh, bshd, graph_inputs, ragged_graph

    strides = {"in_place": bshd, "unpacked": bseh}[layout]
    g = ragged_graph(backward, causal, dtype, layout=strides)
    inputs = graph_inputs(g, arrays(causal, dtype, layout=strides)[0])
    report = sigdnn.validate(g, inputs, executor=sigdnn.Executor("gpu"))
    assert set(report.builders.values()) == {"cutile.sdpa_backward" if backward else BUILDER}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_ragged_attention_of_mixed_lengths_at_size(backward: bool) -> None:
    """8 sequences of validation's random lengths up to 600 tokens, bf16, GQA, head dim 128, causal."""
    from ragged_attention_cases import bshd

    g = sigdnn.Graph("ragged_at_size", io_dtype="bfloat16", compute_dtype="float32")
    shapes = {"q": (8, 8, 600, 128), "k": (8, 2, 600, 128), "v": (8, 2, 600, 128), "o": (8, 8, 600, 128)}
    q, k, v = (g.tensor(p, shapes[p], strides=bshd(shapes[p])) for p in "qkv")
    lengths = {n: g.tensor(n, (8,), dtype="int32") for n in ("seq_len_q", "seq_len_kv")}
    offs = {p: g.tensor(f"{p}_off", (9,), dtype="int32") for p in "qkvo"}
    varlen = {**lengths, "ragged_offsets": offs}
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


def written_in_place(g: sigdnn.Graph, inputs: dict, executor: sigdnn.Executor) -> list[str]:
    """Run into torch buffers filled with FILL (the kernels write them in place) and say what lies wrong in them:
    an in-sequence element not written, or an element outside every sequence written."""
    import torch
    from ragged_attention_cases import FILL, misplaced

    flats = {t.name: torch.full((t.size,), FILL, dtype=torch.float32, device="cuda") for t in g.outputs
             if t.name != "stats"}  # fmt: skip
    outputs = {n: f.as_strided(g.tensor_by_name(n).dims, g.tensor_by_name(n).strides) for n, f in flats.items()}
    executor.run(g, {**inputs, **outputs})
    return misplaced(g, inputs, {n: f.cpu().numpy() for n, f in flats.items()})


@pytest.mark.parametrize("gap", ["packed", "whole_row_gaps", "gaps_inside_rows"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_ragged_in_place_around_the_tile_on_the_gpu(backward: bool, gap: str) -> None:
    """The emulator's sequences of 0, 1, 2, 63, 64 and 65 tokens (GQA, causal, head dims 40 and 24), packed, with
    gaps of whole rows and with gaps inside rows (the second launch's sequences): validation passes and the
    outputs' buffers change exactly inside the sequences."""
    from ragged_attention_cases import GAPS, around_graph, around_inputs, offsets_with_gaps

    executor = sigdnn.Executor("gpu")
    g = around_graph(backward, True)
    inputs = around_inputs(g, {p: offsets_with_gaps(p, GAPS[gap]) for p in "qkvo"}, executor)
    report = sigdnn.validate(g, inputs, executor=executor)
    assert set(report.builders.values()) == {"cutile.sdpa_backward" if backward else BUILDER}, report.builders
    assert report.passed, report.table()
    assert written_in_place(g, inputs, executor) == []


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_hostile_ragged_offsets_touch_nothing_outside_the_buffers_on_the_gpu(backward: bool) -> None:
    """Offsets past the buffers' end, before their start, one running past the end, one inside a row past the
    end: the run completes (an access outside a buffer would fault), writes exactly the in-sequence elements
    inside the buffers, and the sequences at good offsets come out as with a good table."""
    import numpy as np
    from ragged_attention_cases import (
        LENGTHS,
        PLACER,
        around_graph,
        around_inputs,
        hostile_offsets,
        offsets_with_gaps,
        positions,
        storage,
    )

    executor = sigdnn.Executor("gpu")
    g = around_graph(backward, True)
    hostile = around_inputs(g, hostile_offsets(), executor)
    assert written_in_place(g, hostile, executor) == []
    good = executor.run(g, around_inputs(g, {p: offsets_with_gaps(p, 0) for p in "qkvo"}, executor))
    bad = executor.run(g, hostile)
    for name in ("dq", "dk", "dv") if backward else ("o",):
        t = g.tensor_by_name(name)
        at = positions(t, hostile[f"{PLACER[name]}_off"][[0, 4]], LENGTHS[PLACER[name]][[0, 4]])
        np.testing.assert_array_equal(storage(bad[name], t)[at], storage(good[name], t)[at], err_msg=name)
