"""gdn's walks' ready-made operands at bf16 products (``DeltaRuleShape.ready_operands``; kda forms its own).

A launch of its own stores e^b K, e^b Q and the keys decayed to the chunk's
end in bf16 with each chunk's whole decay e^(b_L), the chunk kernel QK and T
in bf16, and the walks (the forward's and the backward's two) read them
instead of forming them on their serial paths. ``dot`` rounds its operands
to bf16 either way, so outputs and gradients equal those of the walks that
form them, bit for bit on the emulator; validation against the float64
recurrence passes, and each bug planted in the hand-over moves the results
and fails validation.
"""

from __future__ import annotations

import numpy as np
import pytest
from delta_rule_cases import CHUNK_EDGES, delta_rule_backward_graph, delta_rule_graph
from delta_rule_checks import check, plant
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.plan_builders.cutile.delta_rule import (
    CutileGdnBuilder,
    CutileGdnBwdBuilder,
    CutileKdaBuilder,
)
from sigdnn.plan_builders.cutile.delta_rule_kernel import DeltaRuleShape
from sigdnn.plan_builders.cutile.steps import WORKSPACE

LENGTHS = (*CHUNK_EDGES, 130)


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def bf16_graph() -> tuple[sigdnn.Graph, dict[str, np.ndarray]]:
    """A gdn node over ``LENGTHS``, K = V = 16, at a bfloat16 compute dtype (bf16 products), with gates strong
    enough that a missing decay shows."""
    g, inputs = delta_rule_graph("gdn", LENGTHS, kd=16, vd=16)
    g.nodes[-1].compute_dtype = sigdnn.DataType("bfloat16")
    gate = -np.random.default_rng(3).uniform(0, 0.5, inputs["g"].shape)
    return g, {**inputs, "g": gate.astype(np.float32)}


@pytest.mark.parametrize("compute", ["float32", "float16", "bfloat16"])
def test_only_bf16_products_hand_the_walk_its_operands(compute) -> None:
    """At bf16 products a launch of its own stores the walk's operands, the chunk kernel QK and T, all bf16, and the
    walk takes no q, k or g; at any other compute dtype the walk forms them (its operands would be TF32 or float32:
    twice the traffic)."""
    g, _ = delta_rule_graph("kda", LENGTHS)
    g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
    assert "delta_rule_ready" not in [launch.source.prefix for launch in CutileKdaBuilder().launches(g.nodes[-1], g)[0]]
    g, _ = delta_rule_graph("gdn", LENGTHS)
    g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
    launches = CutileGdnBuilder().launches(g.nodes[-1], g)[0]
    ready = compute == "bfloat16"
    names = ["delta_rule_chunks", *(["delta_rule_ready"] * ready), "delta_rule_order", "delta_rule_fwd"]
    assert [launch.source.prefix for launch in launches] == names
    walk = launches[-1]
    assert [a.buffer for a in walk.args][:3] == (["v", "beta", "cu_seqlens"] if ready else ["q", "k", "v"])
    handed = [a.dtype for a in walk.args if a.buffer == WORKSPACE][1:]  # after the order
    assert handed == (["bfloat16"] * 5 + ["float32"] if ready else ["float32"] * 2)


def test_ready_operands_give_the_walks_outputs_bit_for_bit(monkeypatch) -> None:
    g, inputs = bf16_graph()
    ready = emulated_executor().run(g, inputs)
    with monkeypatch.context() as patch:
        patch.setattr(DeltaRuleShape, "ready_operands", property(lambda s: False))
        g, inputs = bf16_graph()
        assert [a.buffer for a in CutileGdnBuilder().launches(g.nodes[-1], g)[0][-1].args][:2] == ["q", "k"]
        formed = emulated_executor().run(g, inputs)
    assert set(ready) == set(formed) == {"o", "final"}
    for name in formed:
        np.testing.assert_array_equal(ready[name], formed[name], err_msg=name)


def test_ready_operands_validate_against_the_recurrence() -> None:
    g, inputs = bf16_graph()
    report = check(g, inputs, "cutile.gdn")
    assert report.passed, report.table()


# Bugs in the hand-over of the walk's operands: each must fail validation at bf16 products.
PLANTED = {
    "e^b K stored without its decay": ("ready_source", "ct.astype(kt * eb, ke_work.dtype)", "ct.astype(kt, ke_work.dtype)"),
    "e^b Q stored without its decay": ("ready_source", "ct.astype(qt * eb, qe_work.dtype)", "ct.astype(qt, qe_work.dtype)"),
    "the carried keys stored undecayed": ("ready_source", "ct.astype(carried, kc_work.dtype)", "ct.astype(kt, kc_work.dtype)"),
    "the chunk's decay stored as its log": ("ready_source", "ct.exp(b_last))", "b_last)"),
    "the carried keys read as e^b K": ("forward_source", "carried = ct.gather(kc_work,", "carried = ct.gather(ke_work,"),
    "e^b Q read as e^b K": ("forward_source", "qe = ct.gather(qe_work,", "qe = ct.gather(ke_work,"),
    "the chunk's decay left out": ("forward_source", "state = state * decay +", "state = state +"),
    "QK read for T": ("forward_source", "u = dot(ct.gather(t_work,", "u = dot(ct.gather(qk_work,"),
}  # fmt: skip


def planted_bug_is_caught(make, builder: str, planted: tuple[str, str, str], monkeypatch) -> None:
    """The ``planted`` (source function, right text, wrong text) bug moves ``make()``'s results off the right
    kernels', and validation fails on it."""
    g, inputs = make()
    right_outputs = emulated_executor().run(g, inputs)
    source, right, wrong = planted
    with monkeypatch.context() as patch:
        plant(patch, source, right, wrong)
        g, inputs = make()
        outputs = emulated_executor().run(g, inputs)
        assert any(not np.array_equal(outputs[n], right_outputs[n]) for n in right_outputs)
        g, inputs = make()
        assert not check(g, inputs, builder).passed


@pytest.mark.parametrize("bug", list(PLANTED))
def test_bugs_planted_in_the_hand_over_fail_validation(bug, monkeypatch) -> None:
    planted_bug_is_caught(bf16_graph, "cutile.gdn", PLANTED[bug], monkeypatch)


def bf16_backward_graph() -> tuple[sigdnn.Graph, dict[str, np.ndarray]]:
    """gdn_bwd over ``LENGTHS`` at bf16 products, K = V = 16, the gates of ``bf16_graph``."""
    g, inputs = delta_rule_backward_graph("gdn", LENGTHS, kd=16, vd=16)
    g.nodes[-1].compute_dtype = sigdnn.DataType("bfloat16")
    gate = -np.random.default_rng(3).uniform(0, 0.5, inputs["g"].shape)
    return g, {**inputs, "g": gate.astype(np.float32)}


def test_the_backwards_walks_read_the_same_operands_bit_for_bit(monkeypatch) -> None:
    """The backward's two walks (start states forward, d(state) in reverse) read the ready-made operands at bf16
    products: every gradient equals the forming walks' bit for bit."""
    g, inputs = bf16_backward_graph()
    walks = [launch for launch in CutileGdnBwdBuilder().launches(g.nodes[-1], g)[0] if launch.source.prefix in WALKS]
    assert [[a.buffer for a in walk.args][:2] for walk in walks] == [["beta", "cu_seqlens"]] * 2
    ready = emulated_executor().run(g, inputs)
    with monkeypatch.context() as patch:
        patch.setattr(DeltaRuleShape, "ready_operands", property(lambda s: False))
        g, inputs = bf16_backward_graph()
        formed = emulated_executor().run(g, inputs)
    assert set(ready) == set(formed) == {"dq", "dk", "dv", "dg", "dbeta", "dh0"}
    for name in formed:
        np.testing.assert_array_equal(ready[name], formed[name], err_msg=name)


WALKS = ("delta_rule_states", "delta_rule_reverse")
PLANTED_IN_BACKWARD_WALKS = {
    "the start states' chunk decay left out": ("states_source", "state = state * decay +", "state = state +"),
    "the start states carried by e^b K": ("states_source", "carried = ct.gather(kc_work,", "carried = ct.gather(ke_work,"),
    "d(state)'s chunk decay left out": ("reverse_source", "dstate = dstate * decay", "dstate = dstate"),
    "d(state) through e^b K for e^b Q": ("reverse_source", "qe = ct.gather(qe_work,", "qe = ct.gather(ke_work,"),
    "d(state) through e^b Q for e^b K": ("reverse_source", "ke = ct.gather(ke_work,", "ke = ct.gather(qe_work,"),
}  # fmt: skip


@pytest.mark.parametrize("bug", list(PLANTED_IN_BACKWARD_WALKS))
def test_bugs_planted_in_the_backwards_walks_fail_validation(bug, monkeypatch) -> None:
    planted = PLANTED_IN_BACKWARD_WALKS[bug]
    planted_bug_is_caught(bf16_backward_graph, "cutile.gdn_bwd", planted, monkeypatch)


@pytest.mark.parametrize(
    "options",
    [{"state": None, "final": False}, {"state": "bfloat16", "kd": 70, "vd": 8}, {"io": "float16", "state": None}],
    ids=["no states", "K 70 padded to 128, bf16 states", "f16 io"],
)
def test_ready_operands_across_states_and_widths(options) -> None:
    """No initial or final state, K padded (the stored operands' padding columns are 0), bf16 states, f16 inputs:
    forward and backward at bf16 products validate."""
    g, inputs = delta_rule_graph("gdn", (1, 63, 64, 65, 200), **options)
    g.nodes[-1].compute_dtype = sigdnn.DataType("bfloat16")
    report = check(g, inputs, "cutile.gdn")
    assert report.passed, report.table()
    backward = {name: value for name, value in options.items() if name != "final"}
    g, inputs = delta_rule_backward_graph("gdn", (1, 63, 64, 65, 200), d_final=options.get("final", True), **backward)
    g.nodes[-1].compute_dtype = sigdnn.DataType("bfloat16")
    report = check(g, inputs, "cutile.gdn_bwd")
    assert report.passed, report.table()
