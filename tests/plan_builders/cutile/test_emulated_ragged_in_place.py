"""cuTile attention reading and writing ragged (token-packed) tensors in place, through the emulator.

A ragged tensor whose head dim's elements lie side by side is handed to the
attention kernels as a [rows, head dim] view of its buffer: a tile's rows
are loaded by a row-index tile and stored whole only where every row lies
inside the sequence, else element by element; a sequence whose offset is
not a multiple of the head dim goes to the second launch, which reads and
writes element by element. Here: the launches, sequences of 0, 1, 63, 64
and 65 tokens (around the 64-row tiles) with gaps between them (whole rows
and not), the bytes of an output outside the sequences, hostile offsets
(the reference refuses them; the kernels must neither read nor write
outside the buffers), and planted bugs. The emulator refuses what cuTile
leaves undefined (a tile wholly outside an array, a store at a row outside
the view), so a kernel that relied on one fails here too.
"""

from __future__ import annotations

import numpy as np
import pytest
from emulated import emulated_executor, make_available, planted, run_blocks_in_reverse
from ragged_attention_cases import (
    DV,
    FILL,
    GAPS,
    HKV,
    HQ,
    LENGTHS,
    PLACER,
    SKV,
    SQ,
    B,
    D,
    around_graph,
    around_inputs,
    bseh,
    bshd,
    hostile_offsets,
    logical,
    misplaced,
    offsets_with_gaps,
    positions,
    ragged_graph,
    storage,
)

import sigdnn
from sigdnn.errors import ExecutionError
from sigdnn.graph.ops.ragged import OFFSET_SUFFIX
from sigdnn.plan_builders.cutile import attention
from sigdnn.plan_builders.cutile.attention import (
    CutileSdpaBackwardBuilder,
    CutileSdpaBuilder,
    row_strides,
    unpack_reason,
)


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def test_the_forward_reads_and_writes_every_ragged_tensor_in_place() -> None:
    """Two launches of one kernel and no workspace: a block per 64 rows of each (batch, head) for the sequences
    that start on a row of their view, and a block per (batch, head) for those that do not (SHIFTED, the last
    constant); q, k, v and o as [rows, head dim] views, their offsets' first B elements, rows per head and per
    token (BSHD: 1 and H), every RAGGED constant on."""
    g = ragged_graph(False, False, "bfloat16")
    (whole, shifted), workspace = CutileSdpaBuilder().launches(g.nodes[-1], g)
    assert workspace == 0 and whole.source == shifted.source and whole.source.prefix == "attention"
    assert whole.grid == (2, B * HQ, 1) and shifted.grid == (1, B * HQ, 1)
    views = {a.buffer: (a.shape, a.strides) for a in whole.args}
    tokens = {"q": B * SQ, "k": B * SKV, "v": B * SKV, "o": B * SQ}
    heads = {"q": HQ, "k": HKV, "v": HKV, "o": HQ}
    widths = {"q": D, "k": D, "v": DV, "o": DV}
    for p in "qkvo":
        assert views[p] == ((tokens[p] * heads[p], widths[p]), (widths[p], 1))
        assert views[p + OFFSET_SUFFIX] == ((B,), (1,))
    assert whole.args[-4:] == shifted.args[-4:]
    assert whole.constants[5:13] == (1, HQ, 1, HKV, 1, HKV, 1, HQ)
    assert whole.constants[-5:] == (True, True, True, True, False)
    assert shifted.constants == (*whole.constants[:-1], True)


def test_the_backward_places_the_gradients_and_d_o_by_their_forward_tensors() -> None:
    """dq by q's offsets, dk / dv by k's / v's, d_o by o's: each a [rows, head dim] view, two launches per kernel."""
    g = ragged_graph(True, True, "float32")
    launches, workspace = CutileSdpaBackwardBuilder().launches(g.nodes[-1], g)
    assert workspace == 0
    assert [la.source.prefix for la in launches] == ["attention_dq"] * 2 + ["attention_dkdv"] * 2
    assert [la.grid for la in launches] == [(2, B * HQ, 1), (1, B * HQ, 1), (2, B * HKV, 1), (1, B * HKV, 1)]
    dq, dkdv = launches[0], launches[2]
    views = {a.buffer: a.shape for a in (*dq.args, *dkdv.args)}
    assert views["d_o"] == views["o"] == (B * SQ * HQ, DV) and views["dq"] == views["q"] == (B * SQ * HQ, D)
    assert views["dk"] == (B * SKV * HKV, D) and views["dv"] == (B * SKV * HKV, DV)
    assert dq.constants[-5:] == dkdv.constants[-5:] == (True, True, True, True, False)


def test_k_and_v_alone_read_in_place() -> None:
    """q and o padded batches: their views stay 4-D, their offsets a stand-in, their row strides 0; k and v read in
    place still take the second launch, forward and backward."""
    g = ragged_graph(False, False, "float32", ragged="kv")
    (whole, _), _ = CutileSdpaBuilder().launches(g.nodes[-1], g)
    assert [len(a.shape) for a in whole.args[:4]] == [4, 2, 2, 4]
    assert whole.constants[5:13] == (0, 0, 1, HKV, 1, HKV, 0, 0)
    assert whole.constants[-5:] == (False, True, True, False, False)
    g = ragged_graph(True, False, "float32", ragged="kv")
    launches, _ = CutileSdpaBackwardBuilder().launches(g.nodes[-1], g)
    assert [la.constants[-1] for la in launches] == [False, True, False, True]


@pytest.mark.parametrize(
    ("dims", "strides", "reason"),
    [
        ((2, 3, 5, 8), bshd((2, 3, 5, 8)), None),
        ((2, 3, 5, 8), (120, 40, 8, 1), None),  # BHSD
        ((2, 3, 5, 8), bseh((2, 3, 5, 8)), "its head dim's elements lie 3 apart"),
        ((2, 3, 5, 2), bseh((2, 3, 5, 2)), "its head dim's elements lie 3 apart"),
        ((2, 3, 2, 8), bshd((2, 3, 2, 8)), None),  # two positions: a row stride of 3
        ((2, 3, 5, 1), (15, 1, 3, 7), None),  # a head dim of one: its stride addresses nothing
    ],
)
def test_what_is_read_in_place_and_its_row_strides(dims, strides, reason) -> None:  # type: ignore[no-untyped-def]
    t = sigdnn.Graph("t").tensor("x", dims, strides=strides)
    assert unpack_reason(t) == reason or reason in unpack_reason(t)
    if reason is None:
        assert row_strides(t) == (strides[1] // dims[3], strides[2] // dims[3])


def test_a_dim_of_one_has_no_row_stride() -> None:
    """A head or position dim of one is never stepped along: its stride (whatever it is) gives no row stride."""
    t = sigdnn.Graph("t").tensor("x", (2, 1, 1, 8), strides=(8, 24, 16, 1))
    assert row_strides(t) == (0, 0)


def damage(g: sigdnn.Graph, inputs: dict[str, np.ndarray], validate: bool = True, **executor: object) -> list[str]:
    """What goes wrong on the emulated GPU (``executor``: emulated_executor's arguments): a failed validation, an
    exception (the emulator refuses what cuTile leaves undefined), or output buffers written where they should
    not be or not where they should (``misplaced``)."""
    run = emulated_executor(**executor)
    found: list[str] = []
    flats = {t.name: np.full(t.size, FILL, np.float32) for t in g.outputs if t.name != "stats"}
    try:
        if validate and not sigdnn.validate(g, inputs, executor=run).passed:
            found.append("validation failed")
        run.execute(run.prepare(g), {**inputs, **{n: logical(f, g.tensor_by_name(n)) for n, f in flats.items()}})
    except (ExecutionError, IndexError, ValueError) as e:
        return [*found, f"raised {type(e).__name__}: {e}"]
    return found + misplaced(g, inputs, flats)


def around_case(backward: bool, causal: bool, gap: int) -> tuple[sigdnn.Graph, dict[str, np.ndarray]]:
    g = around_graph(backward, causal)
    return g, around_inputs(g, {p: offsets_with_gaps(p, gap) for p in "qkvo"}, emulated_executor())


def hostile_case(backward: bool) -> tuple[sigdnn.Graph, dict[str, np.ndarray]]:
    g = around_graph(backward, True)
    return g, around_inputs(g, hostile_offsets(), emulated_executor())


@pytest.mark.parametrize("gap", GAPS.values(), ids=GAPS)
@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_sequences_around_the_tile_validate_and_nothing_outside_them_is_written(
    backward: bool, causal: bool, gap: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sequences of 0, 1, 2, 63, 64 and 65 tokens (a tile of 64 rows: one short, whole, one over), packed, with
    gaps of whole rows, and with gaps that start all but the first sequence inside a row (those go to the
    second launch, the first to the first); blocks run last to first (a block writing past its sequence would
    be overwritten by the next sequence's block in the other order)."""
    run_blocks_in_reverse(monkeypatch)
    g, inputs = around_case(backward, causal, gap)
    assert damage(g, inputs) == []


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_hostile_offsets_are_refused_by_the_reference_and_read_or_write_nothing_outside_the_buffers(
    backward: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offsets far past the buffers' end and before their start, one whose sequence runs past the end, one past
    the end and inside a row: the reference raises naming them; the kernels (the offsets read on the device,
    unchecked: a check would synchronize every run) touch nothing outside the buffers (the emulator's arrays
    are the buffers: an access outside raises), write every in-sequence element that lies inside, and the
    sequences at good offsets come out as with a good table."""
    run_blocks_in_reverse(monkeypatch)
    g, clean = around_case(backward, True, 0)
    _, hostile = hostile_case(backward)
    with pytest.raises(ExecutionError, match="_off"):
        sigdnn.Executor().run(g, hostile)
    assert damage(g, hostile, validate=False) == []
    good, bad = emulated_executor().run(g, clean), emulated_executor().run(g, hostile)
    for name, got in bad.items():
        if name != "stats":
            t = g.tensor_by_name(name)
            at = positions(t, hostile[f"{PLACER[name]}_off"][[0, 4]], LENGTHS[PLACER[name]][[0, 4]])
            np.testing.assert_array_equal(storage(got, t)[at], storage(good[name], t)[at], err_msg=name)


PLANTS = {  # the bug: (the text, what it becomes, the case that shows it)
    "row_index_off_by_one": ("return first + h * row_h + positions(i, ROWS) * row_s",
                             "return first + h * row_h + (positions(i, ROWS) + 1) * row_s", "packed"),
    "head_by_the_token_stride": ("return first + h * row_h + positions", "return first + h * row_s + positions",
                                 "packed"),
    "sequence_end_ignored_on_store": ("keep = (positions(i, ROWS) < end) & (rows >= 0)", "keep = (rows >= 0)",
                                      "packed"),
    "a_partial_tile_stored_whole": ("elif ct.min(ct.astype(keep, ct.int32)) == 1:",
                                    "elif ct.max(ct.astype(keep, ct.int32)) == 1:", "packed"),
    "shift_ignored": ("(1, COLS)) + shift", "(1, COLS))", "gaps_inside_rows"),
    "shifted_blocks_served_by_neither_launch": ("return qp[3] + kp[3] + vp[3] + op[3] != 0",
                                                "return qp[3] + kp[3] + vp[3] + op[3] == 0", "gaps_inside_rows"),
    "shifted_row_past_the_head_dim": ("cols < shift + width", "cols < shift + width + 1", "gaps_inside_rows"),
    "rows_outside_the_view_loaded": ("rows = ct.where((rows >= 0) & (rows < x.shape[0]), rows, 0)", "rows = rows + 0",
                                     "hostile"),
}  # fmt: skip


@pytest.mark.parametrize("bug", PLANTS)
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_a_planted_in_place_bug_does_damage(bug: str, backward: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each bug, planted in the kernels' text, fails validation, raises in the emulator, or writes outside the
    sequences (or leaves some of them unwritten)."""
    old, new, case = PLANTS[bug]
    assert attention.kernel_source().text.count(old) == 1, old
    registry, name = planted(CutileSdpaBackwardBuilder if backward else CutileSdpaBuilder,
                             lambda text: text.replace(old, new, 1))  # fmt: skip
    run_blocks_in_reverse(monkeypatch)
    g, inputs = hostile_case(backward) if case == "hostile" else around_case(backward, False, GAPS[case])
    assert damage(g, inputs, validate=case != "hostile", registry=registry, engine=name)
