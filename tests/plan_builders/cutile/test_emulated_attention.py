"""cuTile attention forward through the emulator: against torch float64 attention and sigdnn.validate.

What the CuTe flash attention declines: float32, head dims 32 / 80 / 96 / 256 (q / k and v apart),
grouped and multi-query heads, the top-left causal mask with Sq != Skv, BSHD strides, the stats
output, diagonal bands (sliding windows, bottom-right alignment, rows the band leaves no key). Each case must pass validation against the reference and stay within a float32 bound of torch's
float64 attention; planted bugs in the kernel text must fail validation.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from attention_cases import (
    CASES,
    Case,
    backward_graph,
    consistent_backward_inputs,
    graph,
    torch_attention,
    torch_attention_backward,
)
from emulated import emulated_executor, make_available, planted

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cutile import attention
from sigdnn.plan_builders.cutile.attention import CutileSdpaBackwardBuilder, CutileSdpaBuilder

BUILDER = "cutile.sdpa"


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def run(g: sigdnn.Graph, inputs: dict[str, np.ndarray], executor: sigdnn.Executor | None = None) -> dict:
    executor = executor or emulated_executor()
    plan = executor.prepare(g)
    assert [s.builder.name for s in plan.steps] == [BUILDER]
    return executor.execute(plan, inputs)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_attention_is_within_float32_of_torchs_float64(case: Case) -> None:
    g = graph(case)
    inputs = random_inputs(g, seed=len(case.name))
    got = run(g, inputs)
    o, lse = torch_attention(case, inputs)
    eps = {"float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}[case.dtype]
    # p rounded to a 16-bit v's dtype before P V (eps / 2 x max |v|), float32 sums over Skv, o's rounding
    bound = (eps * np.abs(o) + case.skv * 2.0**-23 * np.abs(inputs["v"].astype(np.float64)).max()
             + (eps / 2 if case.dtype != "float32" else 0) * np.abs(inputs["v"].astype(np.float64)).max())  # fmt: skip
    assert (np.abs(got["o"].astype(np.float64) - o) <= bound).all()
    if case.stats:
        np.testing.assert_allclose(got["stats"], lse, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_validation_against_the_reference_passes(case: Case) -> None:
    g = graph(case)
    report = sigdnn.validate(g, random_inputs(g, seed=1 + len(case.name)), executor=emulated_executor())
    assert set(report.builders.values()) == {BUILDER}, report.builders
    assert report.passed, report.table()


def test_a_hand_worked_attention() -> None:
    """One query [1, 0] over keys [1, 0] and [0, 1] (scale ln 3): scores ln 3 and 0, weights 3/4 and 1/4."""
    g = sigdnn.Graph("hand", io_dtype="float32", compute_dtype="float32")
    q, k, v = g.tensor("q", (1, 1, 1, 2)), g.tensor("k", (1, 1, 2, 2)), g.tensor("v", (1, 1, 2, 2))
    o, _ = g.sdpa(q, k, v, attn_scale=float(np.log(3.0)), name="sdpa")
    o.set_output(True).set_name("o")
    got = run(g, {"q": np.array([[[[1, 0]]]], np.float32), "k": np.array([[[[1, 0], [0, 1]]]], np.float32),
                  "v": np.array([[[[4, 0], [0, 8]]]], np.float32)})["o"]  # fmt: skip
    np.testing.assert_allclose(got, [[[[3.0, 2.0]]]], rtol=1e-6)


PLANTED = {
    "running_sum_not_rescaled": ("total = total * alpha + ", "total = total + ", CASES[0]),
    "accumulator_not_rescaled": ("acc = acc * alpha + pv", "acc = acc + pv", CASES[0]),
    "causal_diagonal_hidden": (
        "keep & (cols <= rows + (align + right))",
        "keep & (cols < rows + (align + right))",
        CASES[1],
    ),
    "key_tail_kept": (
        "band_kept((cols < keys_end) & (rows < rows_end)",
        "band_kept((cols < keys_end + 1) & (rows < rows_end)",
        CASES[0],
    ),
    "kv_head_by_query_head": ("kv = h // groups", "kv = h % groups", CASES[0]),
    "causal_steps_cut_short": ("(i + 1) * TM + align + right, 0", "i * TM + align + right, 0", CASES[1]),
    "window_edge_kept": ("(cols > rows + (align - left))", "(cols >= rows + (align - left))", CASES[4]),
    "window_starts_a_tile_late": (
        "i * TM + align - left + 1, 0) // TN",
        "i * TM + align - left + 1, 0) // TN + 1",
        CASES[4],
    ),
    "bottom_right_as_top_left": ("return keys_end - rows_end", "return 0 * keys_end", CASES[5]),
    "right_bound_ignored": ("    if RIGHT:\n        keep", "    if False:\n        keep", CASES[6]),
}


@pytest.mark.parametrize("bug", PLANTED)
def test_a_planted_bug_fails_validation(bug: str) -> None:
    old, new, case = PLANTED[bug]
    assert old in attention.kernel_source().text
    registry, name = planted(CutileSdpaBuilder, lambda text: text.replace(old, new))
    g = graph(case)
    executor = emulated_executor(registry=registry, engine=name)
    assert not sigdnn.validate(g, random_inputs(g, seed=5), executor=executor).passed


@pytest.mark.parametrize(
    ("change", "message"),
    [({"compute_dtype": "float16"}, "compute dtype float16"), ({"d": 512}, "up to 256")],
)
def test_what_it_declines_is_named(change: dict, message: str) -> None:
    g = sigdnn.Graph("decline", io_dtype="float32", compute_dtype=change.get("compute_dtype", "float32"))
    d = change.get("d", 64)
    q, k, v = (g.tensor(n, (1, 1, 8, d)) for n in "qkv")
    o, _ = g.sdpa(q, k, v, attn_scale=0.1, name="sdpa")
    o.set_output(True)
    with pytest.raises(NotSupported, match=message):
        CutileSdpaBuilder().check(g.nodes[-1], g)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backward_is_close_to_torchs_float64_autograd(case: Case) -> None:
    g = backward_graph(case)
    inputs = consistent_backward_inputs(case, seed=len(case.name))
    executor = emulated_executor()
    plan = executor.prepare(g)
    assert [s.builder.name for s in plan.steps] == ["cutile.sdpa_backward"]
    got = executor.execute(plan, inputs)
    eps = {"float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}[case.dtype]
    for name, want in zip(("dq", "dk", "dv"), torch_attention_backward(case, inputs)):
        # o, stats and the inputs are rounded to their dtypes; a few of their ulps times the largest gradient
        tolerance = 8 * eps * np.abs(want).max() + 1e-6
        assert np.abs(got[name].astype(np.float64) - want).max() <= tolerance, name


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_backward_validation_against_the_reference_passes(case: Case) -> None:
    g = backward_graph(case)
    report = sigdnn.validate(g, consistent_backward_inputs(case, seed=2), executor=emulated_executor())
    assert set(report.builders.values()) == {"cutile.sdpa_backward"}, report.builders
    assert report.passed, report.table()


BACKWARD_PLANTED = {
    "dq_delta_dropped": ("acc = ct.mma(operand(p * (dp - delta), WIDE, k.dtype), km, acc)",
                         "acc = ct.mma(operand(p * dp, WIDE, k.dtype), km, acc)", CASES[0]),
    "dq_causal_mask_dropped": ("        p = ct.where(keep, ct.exp(s - lse), 0.0)\n        dp",
                               "        p = ct.where(cols < skv, ct.exp(s - lse), 0.0)\n        dp", CASES[1]),
    "dkdv_one_head_of_the_group": ("for g in range(groups):", "for g in range(1):", CASES[0]),
    "dkdv_causal_start_late": ("j * TN - align - right, 0) // TM", "j * TN - align - right, 0) // TM + 1", CASES[1]),
    "dkdv_window_ends_a_tile_early": ("(j + 1) * TN - 1 - align + left", "j * TN - 1 - align + left", CASES[4]),
    "dv_from_ds": ("dv_acc = ct.mma(operand(ct.transpose(p), WIDE, d_o.dtype), dom, dv_acc)",
                   "dv_acc = ct.mma(operand(ct.transpose(p), WIDE, d_o.dtype), operand(ot, WIDE, o.dtype), dv_acc)",
                   CASES[3]),
    "dk_unscaled": ("tile=ct.reshape(ct.astype(dk_acc * scale, dk.dtype)", "tile=ct.reshape(ct.astype(dk_acc, dk.dtype)",
                    CASES[0]),
}  # fmt: skip


@pytest.mark.parametrize("bug", BACKWARD_PLANTED)
def test_a_planted_backward_bug_fails_validation(bug: str) -> None:
    old, new, case = BACKWARD_PLANTED[bug]
    assert old in attention.kernel_source("attention_dq").text
    registry, name = planted(CutileSdpaBackwardBuilder, lambda t: t.replace(old, new, 1))
    g = backward_graph(case)
    executor = emulated_executor(registry=registry, engine=name)
    assert not sigdnn.validate(g, consistent_backward_inputs(case, seed=5), executor=executor).passed


# -- the builders' contract, read from the graph alone ----------------------------------------------------------
def attention_node(
    d: int = 64, dv: int = 64, dtype: str = "float32", batch: int = 2, heads: int = 4, kv_heads: int = 2, **extra
):  # type: ignore[no-untyped-def]
    g = sigdnn.Graph("contract", io_dtype=dtype, compute_dtype="float32")
    q, k = g.tensor("q", (batch, heads, 10, d)), g.tensor("k", (batch, kv_heads, 12, d))
    v = g.tensor("v", (batch, kv_heads, 12, dv))
    extras = {}
    if "bias" in extra:
        extras["bias"] = g.tensor("bias", (1, 1, 10, 12))
    o, _ = g.sdpa(q, k, v, attn_scale=0.125, name="sdpa", **extras)
    o.set_output(True)
    return g, g.nodes[-1]


def test_launch_contract() -> None:
    """A block per 64 query rows and (batch, head); int scalars (cuTile's index math); power-of-two tiles of at
    least 16 over each head dim; p narrowed exactly where v is 16-bit, q and k widened exactly where they are not
    of one 16-bit dtype; no workspace."""
    for dtype, narrow in (("float32", False), ("bfloat16", True), ("float16", True)):
        g, node = attention_node(d=80, dv=24, dtype=dtype, batch=3, heads=4, kv_heads=2)
        (launch,), workspace = CutileSdpaBuilder().launches(node, g)
        assert workspace == 0 and launch.grid == (1, 12, 1)
        heads, groups, sq, skv, scale, left, right, *tiles = launch.constants
        assert (heads, groups, sq, skv) == (4, 2, 10, 12) and all(type(c) is int for c in (heads, groups, sq, skv))
        assert scale == 0.125 and (left, right) == (1, 0)  # no band: neither bound is read
        assert tiles == [64, 64, 128, 32, False, False, False, False, narrow, False, not narrow]
    g, node = attention_node(d=80, dv=24, dtype="bfloat16")
    g.tensors[node.op.k].set_data_type("float16")  # q and k of two 16-bit dtypes: no one MMA takes both
    assert CutileSdpaBuilder().launches(node, g)[0][0].constants[-1] is True
    g, node = attention_node(d=8, dv=1)  # a head dim below an MMA's smallest side: a tile of 16
    assert CutileSdpaBuilder().launches(node, g)[0][0].constants[9:11] == (16, 16)


def test_backward_launch_contract() -> None:
    g = sigdnn.Graph("bwd", io_dtype="float32", compute_dtype="float32")
    q, k, v = g.tensor("q", (2, 4, 100, 40)), g.tensor("k", (2, 2, 70, 40)), g.tensor("v", (2, 2, 70, 40))
    o, do = g.tensor("o", (2, 4, 100, 40)), g.tensor("d_o", (2, 4, 100, 40))
    stats = g.tensor("stats", (2, 4, 100, 1))
    for t in g.sdpa_backward(q, k, v, o, do, stats, attn_scale=0.5, use_causal_mask=True, name="bwd"):
        t.set_output(True)
    (dq, dkdv), workspace = CutileSdpaBackwardBuilder().launches(g.nodes[-1], g)
    assert workspace == 0
    assert dq.grid == (2, 8, 1) and dkdv.grid == (2, 4, 1)  # query tiles x (batch, head); key tiles x (batch, kv head)
    assert dq.constants == dkdv.constants == (4, 2, 100, 70, 0.5, 1, 0, 64, 64, 64, 64, False, True, False, False, True)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"bias": True}, "takes no bias"),
        ({"dv": 300}, "up to 256"),
        ({"batch": 65535, "heads": 2, "kv_heads": 1}, "past a grid's 65535"),
    ],
)
def test_what_the_kernels_do_not_take_is_declined_by_name(change: dict, message: str) -> None:
    g, node = attention_node(**change)
    with pytest.raises(NotSupported, match=message):
        CutileSdpaBuilder().check(node, g)


def test_a_grid_of_65535_blocks_is_taken() -> None:
    g, node = attention_node(batch=65535, heads=1, kv_heads=1)
    CutileSdpaBuilder().check(node, g)


def test_it_ranks_below_the_cute_flash_attention() -> None:
    from sigdnn.registry.ranking import rank
    from sigdnn.registry.registry import DEFAULT_REGISTRY
    from sigdnn.signature_keys import key_for

    g, node = attention_node(dtype="bfloat16")
    serving = [b for b in DEFAULT_REGISTRY.serving(key_for(node, g), "gpu") if b.library != "gpu_reference"]
    assert [b.name for b in rank(serving, node, g)] == ["cute.sdpa", BUILDER]


def padded_graph(backward: bool, **band: object) -> sigdnn.Graph:
    """Causal GQA attention over a batch of 4 with padding masks (float32, head dim 80, sequences of up to 70),
    and the band given."""
    g = sigdnn.Graph("padded", io_dtype="float32", compute_dtype="float32")
    q, k, v = (g.tensor(n, (4, h, 70, 80)) for n, h in (("q", 4), ("k", 2), ("v", 2)))
    lq, lkv = (g.tensor(n, (4, 1, 1, 1)).set_data_type("int32") for n in ("seq_len_q", "seq_len_kv"))
    if not backward:
        o, stats = g.sdpa(q, k, v, attn_scale=0.1, use_causal_mask=True, generate_stats=True, seq_len_q=lq,
                          seq_len_kv=lkv, name="sdpa", **band)  # fmt: skip
        o.set_output(True).set_name("o")
        stats.set_output(True).set_name("stats")
        return g
    o, do = g.tensor("o", (4, 4, 70, 80)), g.tensor("d_o", (4, 4, 70, 80))
    stats = g.tensor("stats", (4, 4, 70, 1))
    grads = g.sdpa_backward(q, k, v, o, do, stats, attn_scale=0.1, use_causal_mask=True, seq_len_q=lq,
                            seq_len_kv=lkv, name="sdpa_bwd", **band)  # fmt: skip
    for t, name in zip(grads, ("dq", "dk", "dv")):
        t.set_output(True).set_name(name)
    return g


def padded_inputs(backward: bool, poison: bool, **band: object) -> dict[str, np.ndarray]:
    """Lengths 70 / 5 / 0 / 20 queries and 64 / 70 / 9 / 9 keys (the last: query rows past the last key, which a
    key tile holds past its end); with ``poison`` NaN in every padding row (which must not reach a result); for
    the backward, o and stats from the reference forward."""
    rng = np.random.default_rng(4)
    lq, lkv = np.array([70, 5, 0, 20], np.int32), np.array([64, 70, 9, 9], np.int32)
    data = {n: rng.standard_normal(s).astype(np.float32) for n, s in (("q", (4, 4, 70, 80)), ("k", (4, 2, 70, 80)),
                                                                      ("v", (4, 2, 70, 80)), ("d_o", (4, 4, 70, 80)))}  # fmt: skip
    data["seq_len_q"], data["seq_len_kv"] = lq.reshape(4, 1, 1, 1), lkv.reshape(4, 1, 1, 1)
    forward = sigdnn.Executor().run(
        padded_graph(False, **band), {n: data[n] for n in ("q", "k", "v", "seq_len_q", "seq_len_kv")}
    )
    data["o"], data["stats"] = forward["o"], forward["stats"].astype(np.float32)
    if poison:
        for name, lengths in (("q", lq), ("d_o", lq), ("o", lq), ("k", lkv), ("v", lkv)):
            for b, n in enumerate(lengths):
                data[name][b, :, n:] = np.nan
    graph = padded_graph(backward, **band)
    return {t.name: data[t.name] for t in graph.inputs}


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("poison", [False, True], ids=["clean", "nan_padding"])
def test_padding_masks_validate_whatever_the_padding_holds(backward: bool, poison: bool) -> None:
    """Four sequences: full, short, empty (no query) and longer than its keys, against 64 / 70 / 9 / 9 keys."""
    g = padded_graph(backward)
    executor = emulated_executor()
    assert {s.builder.name for s in executor.prepare(g).steps} == {"cutile.sdpa_backward" if backward else BUILDER}
    report = sigdnn.validate(g, padded_inputs(backward, poison), executor=executor)
    assert report.passed, report.table()


PADDED_BANDS = {
    "bottom_right_window": {"diagonal_bottom_right": True, "left_bound": 6},
    "top_left_window": {"left_bound": 30},
    "bottom_right_two_sided": {"diagonal_bottom_right": True, "left_bound": 40, "right_bound": -2},
}


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("band", PADDED_BANDS)
def test_a_band_over_padded_sequences_validates(backward: bool, band: str) -> None:
    """Bottom-right alignment shifts each sequence's diagonal by its own lengths (64 - 70, 70 - 5, 9 - 0, 9 - 20);
    NaN padding, so a key the band lets a padded row see would poison the result."""
    g = padded_graph(backward, **PADDED_BANDS[band])
    executor = emulated_executor()
    assert {s.builder.name for s in executor.prepare(g).steps} == {"cutile.sdpa_backward" if backward else BUILDER}
    report = sigdnn.validate(g, padded_inputs(backward, True, **PADDED_BANDS[band]), executor=executor)
    assert report.passed, report.table()


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_lengths_outside_the_sequence_dims_act_as_the_nearest_bound_on_the_gpu(backward: bool) -> None:
    """The kernels read the lengths on the device, unchecked (a check would synchronize every run): a length past
    S acts as S and one below 0 as 0, so a hostile table neither reads past the tensors nor walks 2**31 keys."""
    g = padded_graph(backward)
    data = padded_inputs(backward, poison=False)
    hostile = {"seq_len_q": [2**31 - 1, 5, -(2**31), 20], "seq_len_kv": [2**31 - 1, -5, 9, 9]}
    bounded = {"seq_len_q": [70, 5, 0, 20], "seq_len_kv": [70, 0, 9, 9]}
    runs = []
    for lengths in (hostile, bounded):
        inputs = data | {n: np.array(v, np.int32).reshape(4, 1, 1, 1) for n, v in lengths.items()}
        runs.append(emulated_executor().run(g, inputs))
    for name, got in runs[0].items():
        np.testing.assert_array_equal(got, runs[1][name], err_msg=name)


LENGTH_PLANTS = {
    "key_lengths_ignored": (False, "band_kept((cols < keys_end) & (rows < rows_end)", "band_kept((cols < skv) & (rows < rows_end)"),
    "padding_values_read": (False, "vt = masked(tile_2d(v, (b, kv, j, 0), TN, TV), key_rows < keys_end)",
                            "vt = tile_2d(v, (b, kv, j, 0), TN, TV)"),
    "dq_padding_keys_read": (True, "        km = masked(mma_tile(k, (b, kv, j, 0), TN, TD, WIDE), key_rows < keys_end)\n"
                             "        vm = masked(mma_tile(v, (b, kv, j, 0), TN, TV, WIDE), key_rows < keys_end)\n",
                             "        km = mma_tile(k, (b, kv, j, 0), TN, TD, WIDE)\n"
                             "        vm = mma_tile(v, (b, kv, j, 0), TN, TV, WIDE)\n"),
    "dkdv_padding_rows_read": (True, "qm = masked(mma_tile(q, (b, h, i, 0), TM, TD, WIDE), real)",
                               "qm = mma_tile(q, (b, h, i, 0), TM, TD, WIDE)"),
}  # fmt: skip


@pytest.mark.parametrize("bug", LENGTH_PLANTS)
def test_a_planted_length_bug_fails_validation(bug: str) -> None:
    backward, old, new = LENGTH_PLANTS[bug]
    assert old in attention.kernel_source().text
    base = CutileSdpaBackwardBuilder if backward else CutileSdpaBuilder
    registry, name = planted(base, lambda t: t.replace(old, new, 1))
    executor = emulated_executor(registry=registry, engine=name)
    report = sigdnn.validate(padded_graph(backward), padded_inputs(backward, poison=True), executor=executor)
    assert not report.passed


@pytest.mark.parametrize(
    ("band", "args"),
    [
        ({}, ((1, 0), (False, False, False))),
        ({"use_causal_mask": True}, ((1, 0), (False, True, False))),
        ({"left_bound": 5, "right_bound": 3, "diagonal_bottom_right": True}, ((5, 3), (True, True, True))),
        ({"use_causal_mask": True, "right_bound": 3}, ((1, 0), (False, True, False))),  # both apply: the narrower
        ({"left_bound": 2**31 - 1, "right_bound": -(2**31) + 1}, ((22, -22), (True, True, False))),
        ({"left_bound": 23, "right_bound": 2**31 - 1}, ((22, 22), (True, True, False))),
    ],
    ids=["none", "causal", "both_bounds", "causal_inside_a_bound", "far_bounds_clamped", "far_right_clamped"],
)
def test_the_band_reaches_the_kernels_clamped_to_the_sequences(band: dict, args: tuple) -> None:
    """Sq 10 + Skv 12 = 22: a bound past +-22 hides every key or none, so it reaches the kernels as +-22 and
    their index sums stay in int32."""
    g = sigdnn.Graph("band", io_dtype="float32", compute_dtype="float32")
    q, k, v = g.tensor("q", (1, 1, 10, 16)), g.tensor("k", (1, 1, 12, 16)), g.tensor("v", (1, 1, 12, 16))
    g.sdpa(q, k, v, attn_scale=0.1, name="sdpa", **band)[0].set_output(True)
    assert attention.band_args(g.nodes[-1], g) == args


@pytest.mark.parametrize(("left", "right"), [(2**31 - 1, None), (None, 2**31 - 1), (None, -(2**31) + 1), (1, -30)])
def test_far_bounds_act_as_the_reference_says(left: int | None, right: int | None) -> None:
    """Clamped bounds give the reference's results: a window wider than the keys hides none, a right bound past
    them none, one below every key all of them (o = 0, stats = -inf)."""
    g = sigdnn.Graph("far", io_dtype="float32", compute_dtype="float32")
    q, k, v = g.tensor("q", (1, 2, 70, 16)), g.tensor("k", (1, 2, 80, 16)), g.tensor("v", (1, 2, 80, 16))
    o, st = g.sdpa(q, k, v, attn_scale=0.3, generate_stats=True, left_bound=left, right_bound=right, name="sdpa")
    o.set_output(True).set_name("o")
    st.set_output(True).set_name("stats")
    report = sigdnn.validate(g, random_inputs(g, seed=9), executor=emulated_executor())
    assert report.builders == {"sdpa": BUILDER} and report.passed, report.table()


def test_lengths_laid_out_with_gaps_are_declined() -> None:
    """The kernels read a batch's length at its index in a flat view: lengths every other element are not that."""
    g = padded_graph(False)
    g.tensor_by_name("seq_len_q").set_stride((2, 1, 1, 1))
    with pytest.raises(NotSupported, match="reads seq_len_q as packed"):
        CutileSdpaBuilder().check(g.nodes[-1], g)


def test_only_the_named_index_ports_may_be_integers() -> None:
    """cuTile builders serve 32- and 16-bit float ports; an attention builder also int32 / int64 lengths, and
    nothing else: an int8 length, an int32 q, or int32 lengths on a builder that names no index ports."""
    from sigdnn.dtypes import DataType
    from sigdnn.plan_builders.cutile.reduction import CutileReductionBuilder
    from sigdnn.signature_keys import key_for

    g = padded_graph(False)
    key = key_for(g.nodes[-1], g)
    builder = CutileSdpaBuilder()
    assert builder.serves(key)
    retyped = lambda port, dtype: attrs.evolve(  # noqa: E731
        key, inputs=tuple((p, dtype if p == port else d) for p, d in key.inputs)
    )
    assert builder.serves(retyped("seq_len_kv", DataType.INT64))
    assert not builder.serves(retyped("seq_len_kv", DataType.INT8))
    assert not builder.serves(retyped("q", DataType.INT32))
    other = CutileReductionBuilder()
    assert not other.serves(attrs.evolve(key, op="reduction"))  # the same int32 lengths, no index ports


def test_the_base_builders_contract(monkeypatch: pytest.MonkeyPatch) -> None:
    """Available exactly when cuTile is; a compute dtype it cannot compute in and an op it does not run are
    declined naming the node."""
    from sigdnn.plan_builders.cutile import pointwise

    monkeypatch.setattr(pointwise, "unavailable_reason", lambda: "no GPU here")
    assert CutileSdpaBuilder().available() == "no GPU here"
    g = sigdnn.Graph("f64", io_dtype="float32", compute_dtype="float64")
    q, k, v = (g.tensor(n, (1, 1, 8, 16)) for n in "qkv")
    g.sdpa(q, k, v, attn_scale=0.1, name="sdpa")[0].set_output(True)
    with pytest.raises(NotSupported, match="node 'sdpa': compute dtype float64"):
        CutileSdpaBuilder().check(g.nodes[-1], g)
    h = sigdnn.Graph("softmax", io_dtype="float32")
    h.softmax(h.tensor("x", (2, 8)), name="sm")[0].set_output(True)
    with pytest.raises(NotSupported, match=r"node 'sm': cutile\.sdpa does not run softmax"):
        CutileSdpaBuilder().check(h.nodes[-1], h)
