"""cuTile attention on ragged (token-packed, THD) tensors through the emulator.

Sequences of different lengths packed end to end ([tokens, H, E] buffers,
one offset per sequence): forward and backward against torch's float64
attention run per sequence (nothing of another sequence can reach it), and
sigdnn.validate against the reference. The buffers of the outputs must keep
what they held past the last sequence (nothing a user owns outside the
sequences is written), and planted bugs in the pack / unpack kernels must
fail validation.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import numpy as np
import pytest
from emulated import emulated_executor, make_available, run_blocks_in_reverse
from ragged_attention_cases import (
    DV,
    HKV,
    HQ,
    LKV,
    LQ,
    SKV,
    SQ,
    B,
    D,
    arrays,
    bshd,
    graph_inputs,
    ragged_graph,
    sequences,
)

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cutile import attention
from sigdnn.plan_builders.cutile.attention import CutileSdpaBackwardBuilder, CutileSdpaBuilder


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


CASES = [(False, "float32"), (True, "float32"), (True, "bfloat16")]
SHIFTS = {"rows": 0, "off_rows": 3}  # sequences from element 0 (on rows: moved as slices) or 3 (gathered)


@pytest.mark.parametrize("shift", SHIFTS.values(), ids=SHIFTS)
@pytest.mark.parametrize(("causal", "dtype"), CASES, ids=[f"{'causal' if c else 'full'}_{d}" for c, d in CASES])
def test_ragged_forward_and_backward_match_torch_per_sequence(causal: bool, dtype: str, shift: int) -> None:
    data, truth = arrays(causal, dtype, shift=shift)
    executor = emulated_executor()
    eps = {"float32": 2.0**-24, "bfloat16": 2.0**-8}[dtype]
    for backward, names, lengths in ((False, ("o",), (LQ,)), (True, ("dq", "dk", "dv"), (LQ, LKV, LKV))):
        g = ragged_graph(backward, causal, dtype)
        plan = executor.prepare(g)
        assert [s.builder.name for s in plan.steps] == ["cutile.sdpa_backward" if backward else "cutile.sdpa"]
        got = executor.execute(plan, graph_inputs(g, data))
        for name, lens in zip(names, lengths):
            want = [t[{"o": 0, "dq": 2, "dk": 3, "dv": 4}[name]] for t in truth]
            scale = max(float(np.abs(w).max()) for w in want if w.size)
            for b, (have, w) in enumerate(zip(sequences(got[name].astype(np.float64), lens, shift), want)):
                # float32 sums over at most 90 terms of magnitude up to the output's: a normwise bound
                assert np.abs(have - w).max(initial=0) <= (64 * eps + 90 * 2.0**-23) * scale, (name, b)


@pytest.mark.parametrize("shift", SHIFTS.values(), ids=SHIFTS)
@pytest.mark.parametrize("reverse", [False, True], ids=["blocks_in_order", "blocks_reversed"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_ragged_attention_validates_and_leaves_the_buffer_past_the_sequences(
    backward: bool, reverse: bool, shift: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Validation against the reference, whichever order the blocks run in (a pack block writing past its
    sequence shows only when the next sequence's block ran first); the outputs' elements before the first
    sequence and past the last keep what they held."""
    if reverse:
        run_blocks_in_reverse(monkeypatch)
    data, _ = arrays(causal=True, dtype="float32", shift=shift)
    g = ragged_graph(backward, True, "float32")
    executor = emulated_executor()
    report = sigdnn.validate(g, graph_inputs(g, data), executor=executor)
    assert report.passed, report.table()
    plan = executor.prepare(g)
    outputs = {t.name: np.full(t.dims, 1234.5, np.float32) for t in g.outputs}
    executor.execute(plan, {**graph_inputs(g, data), **outputs})
    for name, lens in (("dq", LQ), ("dk", LKV), ("dv", LKV)) if backward else (("o", LQ),):
        t = g.tensor_by_name(name)
        flat = np.empty(t.size, np.float32)
        np.lib.stride_tricks.as_strided(flat, t.dims, tuple(4 * s for s in t.strides))[...] = outputs[name]
        used = shift + int(lens.sum()) * t.dims[1] * t.dims[3]
        assert (flat[:shift] == 1234.5).all() and (flat[used:] == 1234.5).all(), name
        assert not (flat[shift:used] == 1234.5).any(), name


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_ragged_attention_in_a_bottom_right_window_validates(backward: bool) -> None:
    """flash-attention's varlen sliding window: each sequence's diagonal through its last key (70 queries on 90
    keys, 1 on 65, 33 on none), 20 keys wide; o and stats of the unbanded forward are inputs like any other."""
    data, _ = arrays(causal=True, dtype="bfloat16", shift=0)
    g = ragged_graph(backward, True, "bfloat16", diagonal_bottom_right=True, left_bound=20)
    report = sigdnn.validate(g, graph_inputs(g, data), executor=emulated_executor())
    assert set(report.builders.values()) == {"cutile.sdpa_backward" if backward else "cutile.sdpa"}
    assert report.passed, report.table()


PLANTS = {  # (the function planted, its line, the bug, the shift its path takes)
    "rows_past_the_length": ("element_places", "ct.where((rows < end) & (cols < dim), at, -1)",
                             "ct.where(cols < dim, at, -1)", 3),
    "offset_ignored": ("element_places", "at = start + h", "at = 0 * start + h", 3),
    "the_wrong_head": ("element_places", "at = start + h * stride_h", "at = start + (h % 2) * stride_h", 3),
    "unpack_to_the_first_row_tile": ("ragged_unpack", "index=(b, h, i, 0)", "index=(b, h, 0, 0)", 0),
    "pack_from_the_first_head": ("ragged_pack", "index=(b, h, i, 0)", "index=(b, 0, i, 0)", 0),
    "slice_a_row_late": ("ragged_unpack", "rows.slice(2, first, first + end)", "rows.slice(2, first + 1, first + end + 1)", 0),
    "pack_a_row_past_the_length": ("ragged_pack", "rows.slice(2, first, first + end)", "rows.slice(2, first, first + end + 1)", 0),
    "the_last_tile_skipped": ("ragged_unpack", "if i * TS < end:", "if (i + 1) * TS < end:", 0),
    "off_rows_taken_as_whole": ("whole_rows", "(first * step == start)", "(first * step <= start)", 3),
}  # fmt: skip


@pytest.mark.parametrize("bug", PLANTS)
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_a_planted_ragged_bug_fails_validation(bug: str, backward: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    kernel, old, new, shift = PLANTS[bug]
    body = attention.ragged_kernel(kernel).text.split(f"def {kernel}(")[1]
    assert old in body.split("@ct.kernel")[0]  # the named kernel's own line

    def plant(text: str) -> str:
        head, body = text.split(f"def {kernel}(")
        return f"{head}def {kernel}({body.replace(old, new, 1)}"

    monkeypatch.setattr(attention, "ragged_kernel", lambda k, real=attention.ragged_kernel: _planted(real(k), plant))
    run_blocks_in_reverse(monkeypatch)
    data, _ = arrays(causal=False, dtype="float32", shift=shift)
    g = ragged_graph(backward, False, "float32")
    assert not sigdnn.validate(g, graph_inputs(g, data), executor=emulated_executor()).passed


def _planted(source, plant):  # type: ignore[no-untyped-def]
    return attrs.evolve(source, text=plant(source.text))


def test_the_launches_unpack_the_inputs_before_and_pack_the_outputs_after() -> None:
    """One unpack per ragged input and one pack per ragged output, a block per 64 rows of each (batch, head),
    each tensor's padded copy a slice of the workspace in its own dtype."""
    g = ragged_graph(False, False, "bfloat16")
    launches, workspace = CutileSdpaBuilder().launches(g.nodes[-1], g)
    names = [launch.source.prefix for launch in launches]
    assert names == ["ragged_unpack"] * 3 + ["attention", "ragged_pack"]
    assert [launch.grid for launch in launches[:3]] == [(2, 12, 1), (2, 6, 1), (2, 6, 1)]
    assert launches[0].constants == (HQ, SQ, D, D, HQ * D, 1, HQ * D, 64, 128)  # strides, then the rows' step
    rows = launches[0].args[1]  # q's buffer (B * SQ tokens) as (1, H, rows, E): every row, and none past it
    assert (rows.buffer, rows.shape, rows.strides) == ("q", (1, HQ, B * SQ, D), (B * SQ * HQ * D, D, HQ * D, 1))
    itemsize = 2
    assert workspace == sum(-(-B * h * s * e * itemsize // 256) * 256 for h, s, e in
                            ((HQ, SQ, D), (HKV, SKV, D), (HKV, SKV, DV), (HQ, SQ, DV)))  # fmt: skip
    assert {a.dtype for launch in launches for a in launch.args if a.buffer == "@workspace"} == {"bfloat16"}
    g = ragged_graph(True, False, "float32")
    launches, _ = CutileSdpaBackwardBuilder().launches(g.nodes[-1], g)
    assert [launch.source.prefix for launch in launches] == (["ragged_unpack"] * 5 + ["attention_dq", "attention_dkdv"]
                                                              + ["ragged_pack"] * 3)  # fmt: skip


def test_offsets_laid_out_with_gaps_are_declined() -> None:
    g = ragged_graph(False, False, "float32")
    g.tensor_by_name("k_off").set_stride((2, 1, 1, 1))
    with pytest.raises(NotSupported, match="reads k_ragged_offset as packed"):
        CutileSdpaBuilder().check(g.nodes[-1], g)


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_only_the_ragged_ports_are_unpacked(backward: bool) -> None:
    """k and v token-packed, q and o padded batches with lengths: two unpacks (and in the backward one pack,
    dk and dv), q / o read in place; the result validates."""
    g = ragged_graph(backward, False, "float32", ragged="kv")
    builder = CutileSdpaBackwardBuilder() if backward else CutileSdpaBuilder()
    launches, _ = builder.launches(g.nodes[-1], g)
    want = ["ragged_unpack"] * 2 + (["attention_dq", "attention_dkdv", "ragged_pack", "ragged_pack"] if backward
                                    else ["attention"])  # fmt: skip
    assert [launch.source.prefix for launch in launches] == want
    data, _ = arrays(causal=False, dtype="float32", ragged="kv")
    report = sigdnn.validate(g, graph_inputs(g, data), executor=emulated_executor())
    assert report.passed, report.table()


def test_a_ragged_tensor_past_int32_offsets_is_declined() -> None:
    g = sigdnn.Graph("huge", io_dtype="bfloat16", compute_dtype="float32")
    dims, lens = (64, 64, 4096, 128), (64,)
    q, k, v = (g.tensor(n, dims, strides=bshd(dims)) for n in "qkv")
    lengths = {n: g.tensor(n, lens, dtype="int32") for n in ("seq_len_q", "seq_len_kv")}
    offs = {"q": g.tensor("q_off", (65,), dtype="int64")}
    g.sdpa(q, k, v, 0.1, name="sdpa", **lengths, ragged_offsets=offs)[0].set_output(True)
    with pytest.raises(NotSupported, match="tensor 'q' spans 2\\^31 elements"):
        CutileSdpaBuilder().check(g.nodes[-1], g)


def test_a_campaign_of_lengths_around_the_tile_validates() -> None:
    """The campaign's sdpa recipe (token-packed sequences of 1, 63, 64, 65 and 130 tokens, lengths and offsets as
    constants), causal and not, bf16 and float32: strict on the cuTile attention, every case validates."""
    from sigdnn.campaign.cases import generate_cases
    from sigdnn.campaign.spec import parse_spec

    spec = parse_spec(
        '[[generate]]\nop = "sdpa"\ndtypes = ["bfloat16", "float32"]\nshapes = [[4, 2, 32, 1, 63, 64, 65, 130]]\n'
        "attributes = { causal = [false, true] }\n",
        Path("/tmp"),
    )
    cases = generate_cases(spec).cases
    assert len(cases) == 4
    for case in cases:
        graph = sigdnn.deserialize(case.graph)
        report = sigdnn.validate(graph, seed=case.seed, executor=emulated_executor(), truth="cpu")
        assert set(report.builders.values()) == {"cutile.sdpa"}, report.builders
        assert report.passed, (case.recipe.label(), report.table())


@pytest.mark.parametrize(
    ("dims", "strides"),
    [
        ((3, 4, 70, 80), (70 * 4 * 80, 80, 4 * 80, 1)),  # BSHD: token-packed
        ((3, 4, 70, 80), (4 * 70 * 80, 70 * 80, 80, 1)),  # BHSD: each head's rows together
        ((3, 1, 70, 80), (70 * 80, 70 * 80, 80, 1)),  # one head
        ((3, 4, 1, 80), (320, 80, 0, 1)),  # one row a sequence, its stride 0: rows one element apart
    ],
    ids=["bshd", "bhsd", "one_head", "one_row"],
)
def test_the_row_view_holds_every_row_that_ends_inside_the_buffer(dims, strides) -> None:
    """A slice of whole rows never reaches past the buffer: the view's last element lies inside it, and one
    more row would not."""
    g = sigdnn.Graph("view", io_dtype="float32")
    t = g.tensor("t", dims, strides=strides)
    rows = attention.row_view("t", t)
    _, heads, count, dim = rows.shape
    _, stride_h, step, stride_e = rows.strides
    last = (heads - 1) * stride_h + (count - 1) * step + (dim - 1) * stride_e
    assert (heads, dim, step) == (dims[1], dims[3], max(strides[2], 1))
    assert last < t.size <= last + step


def test_a_buffer_its_heads_reach_past_has_no_whole_row() -> None:
    """Heads 100 elements apart over a 32-element buffer: no row holds every head inside it, so no sequence is
    moved as a slice (each is gathered, bounds checked)."""
    g = sigdnn.Graph("view", io_dtype="float32")
    rows = attention.row_view("t", g.tensor("t", (1, 4, 1, 8), strides=(32, 100, 8, 1)))
    assert rows.shape == (1, 4, 0, 8)
