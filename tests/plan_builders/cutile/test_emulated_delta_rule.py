"""cuTile gdn / kda forward and backward (the chunked kernels) on the CPU through the emulator, against the float64
recurrence and its exact reverse mode.

Through ``sigdnn.validate`` with its tolerances: lengths around the chunk
(1, 63, 64, 65), several sequences, empty ones, 1000s of tokens, every io
dtype, float32 and bfloat16 states, with and without the l2 norm. Planted
bugs in the kernel text (a chunk boundary off by one, a gate applied once
too often, a sequence boundary ignored) must fail validation.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from delta_rule_cases import CHUNK_EDGES, campaign_recipe, delta_rule_backward_graph, delta_rule_graph
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cutile import delta_rule, delta_rule_kernel
from sigdnn.plan_builders.cutile.delta_rule import (
    CutileGdnBuilder,
    CutileGdnBwdBuilder,
    CutileKdaBuilder,
    CutileKdaBwdBuilder,
)


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def check(graph, inputs, builder: str) -> sigdnn.validation.ValidationReport:
    report = sigdnn.validate(graph, inputs, executor=emulated_executor(), truth="cpu")
    assert report.builders == {"n": builder}
    return report


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(
    ("io", "state", "l2norm", "lengths"),
    [
        ("bfloat16", "float32", True, CHUNK_EDGES),
        ("float16", None, True, (65, 0, 3)),
        ("float32", "bfloat16", False, (128, 1)),
        ("bfloat16", "bfloat16", True, (200,)),
    ],
)
def test_the_chunked_kernel_matches_the_recurrence(kind, io, state, l2norm, lengths) -> None:
    g, inputs = delta_rule_graph(kind, lengths, io=io, state=state, l2norm=l2norm, scale=None if l2norm else 0.5)
    report = check(g, inputs, f"cutile.{kind}")
    assert report.passed, report.table()


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(
    ("io", "state", "d_final", "l2norm", "lengths"),
    [
        ("bfloat16", "float32", True, True, CHUNK_EDGES),
        ("float32", None, False, False, (65, 0, 3)),
        ("float16", "bfloat16", True, True, (130, 1)),
        ("float32", "float32", False, True, (200,)),
    ],
)
def test_the_chunked_backward_matches_reverse_mode_through_the_recurrence(
    kind, io, state, d_final, l2norm, lengths
) -> None:
    g, inputs = delta_rule_backward_graph(kind, lengths, io=io, state=state, d_final=d_final, l2norm=l2norm)
    report = check(g, inputs, f"cutile.{kind}_bwd")
    assert report.passed, report.table()
    assert ("dh0" in {c.name for c in report.outputs}) == (state is not None)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_campaign_cases_with_thousands_of_tokens(kind) -> None:
    """A campaign recipe's case: sequences of 1, 63, 64, 65 and 1500 tokens, cu_seqlens a constant of the graph."""
    g = campaign_recipe(kind, (*CHUNK_EDGES, 1500)).build()
    report = sigdnn.validate(g, random_inputs(g, seed=3), executor=emulated_executor(), truth="cpu")
    assert report.builders == {g.nodes[0].name: f"cutile.{kind}"}
    assert report.passed, report.table()


PLANTED = {
    "chunk boundary off by one": (
        "last = ct.reshape(steps == C - 1, (C, 1))",
        "last = ct.reshape(steps == C - 2, (C, 1))",
    ),
    "gate applied once too often": ("b = ct.mma(ones_below, gt, ct.full(", "b = gt + ct.mma(ones_below, gt, ct.full("),
    "sequence boundary ignored": ("valid = rows < stop", "valid = rows < stop + 1"),
}


@pytest.mark.parametrize("bug", list(PLANTED))
@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_planted_bugs_fail_validation(kind, bug, monkeypatch) -> None:
    right, wrong = PLANTED[bug]

    def planted(shape):
        source = delta_rule_kernel.forward_source(shape)
        assert right in source.text
        return delta_rule_kernel.KernelSource(source.prefix, source.text.replace(right, wrong))

    def planted_backward(shape):
        source = delta_rule_kernel.backward_source(shape)
        assert right in source.text
        return delta_rule_kernel.KernelSource(source.prefix, source.text.replace(right, wrong))

    monkeypatch.setattr(delta_rule, "forward_source", planted)
    monkeypatch.setattr(delta_rule, "backward_source", planted_backward)
    g, inputs = delta_rule_graph(kind, (*CHUNK_EDGES, 130))
    assert not check(g, inputs, f"cutile.{kind}").passed, f"{bug} passed validation (forward)"
    g, inputs = delta_rule_backward_graph(kind, (*CHUNK_EDGES, 130))
    assert not check(g, inputs, f"cutile.{kind}_bwd").passed, f"{bug} passed validation (backward)"


def test_declines_name_the_port() -> None:
    g, _ = delta_rule_graph("gdn", (5,), kd=300)
    with pytest.raises(NotSupported, match="head dims K 300, V 8: at most 256"):
        CutileGdnBuilder().check(g.nodes[0], g)
    g, _ = delta_rule_graph("kda", (5,))
    g.tensors[g.nodes[0].op.g].set_data_type("bfloat16")
    with pytest.raises(NotSupported, match=r"port 'g' \(tensor 'g'\) is bfloat16"):
        CutileKdaBuilder().check(g.nodes[0], g)
    g, _ = delta_rule_graph("kda", (5,))
    g.tensors[g.nodes[0].op.q].set_stride((1, 5, 10))
    with pytest.raises(NotSupported, match=r"port 'q' \(tensor 'q'\) is not packed row-major"):
        CutileKdaBuilder().check(g.nodes[0], g)


@pytest.mark.parametrize("values", [[0, 3, 2**30], [-(2**30), 1, 5], [0, 5, 2]])
def test_hostile_boundaries_cost_at_most_the_tokens_and_stay_inside(values) -> None:
    """The kernel does not check cu_seqlens (the reference does): it clamps them to [0, T], so it neither walks
    2^30 tokens (2^24 chunks: minutes in the emulator) nor touches memory past the tensors."""
    g, inputs = delta_rule_graph("gdn", (3, 2))
    inputs["cu"] = np.array(values, np.int32)
    ex = emulated_executor()
    plan = ex.prepare(g)
    assert plan.steps[0].builder.name == "cutile.gdn"
    started = time.perf_counter()
    out = ex.execute(plan, inputs)
    assert time.perf_counter() - started < 10
    assert out["o"].shape == (5, 2, 8)


def test_one_kernel_serves_every_token_count() -> None:
    """T is read from q's length on the device: batches of other lengths reuse the compiled text."""
    shape = delta_rule_kernel.DeltaRuleShape(2, 8, 8, False, True, 0.5, True, True)
    text = delta_rule_kernel.forward_source(shape).text
    assert "tokens = q.shape[0] // (H * K)" in text
    g1, _ = delta_rule_graph("gdn", (3, 2))
    g2, _ = delta_rule_graph("gdn", (300, 7, 1))
    sources = [CutileGdnBuilder().launches(g.nodes[0], g)[0][0].source for g in (g1, g2)]
    assert sources[0] == sources[1]


@pytest.mark.parametrize(
    ("port", "dtype", "allowed"),
    [
        ("cu_seqlens", "int32", True), ("cu_seqlens", "int64", True), ("cu_seqlens", "float32", False),
        ("g", "float32", True), ("g", "bfloat16", False), ("dg", "float32", True), ("dg", "float16", False),
        ("initial_state", "bfloat16", True), ("d_final_state", "float32", True), ("final_state", "float16", False),
        ("d_initial_state", "float16", False), ("q", "float16", True), ("v", "float64", False),
    ],
)  # fmt: skip
def test_the_dtypes_each_port_takes(port, dtype, allowed) -> None:
    assert delta_rule.dtype_allowed(port, sigdnn.dtypes.as_data_type(dtype)) is allowed


def test_the_backward_workspace_holds_a_state_slot_per_chunk() -> None:
    """Slots floor(start / 64) + n for every chunk of every sequence: T // 64 + N + 1 of them, per head."""
    g, _ = delta_rule_backward_graph("kda", (64, 65, 1), heads=2, kd=8, vd=4)
    launches, workspace = CutileKdaBwdBuilder().launches(g.nodes[0], g)
    assert workspace >= (130 // 64 + 3 + 1) * 2 * 8 * 4 * 4
    assert launches[0].grid == (3, 2, 1) and launches[0].args[-1].shape == ((130 // 64 + 3 + 1) * 2 * 8 * 4,)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_a_16_bit_compute_dtype_runs_the_chunk_products_as_tf32(kind, backward) -> None:
    """With a 16-bit compute dtype the products go as TF32, the gate's cumulative sums exact: the kernel text says
    so, the outputs move off the float32 run's, and validation against the recurrence passes at its tolerance."""
    make = delta_rule_backward_graph if backward else delta_rule_graph
    builder = {"gdn": CutileGdnBwdBuilder if backward else CutileGdnBuilder,
               "kda": CutileKdaBwdBuilder if backward else CutileKdaBuilder}[kind]()  # fmt: skip
    outputs = {}
    for compute in ("float32", "float16", "bfloat16"):
        g, inputs = make(kind, CHUNK_EDGES, kd=16, vd=16)
        g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
        (launch,), _ = builder.launches(g.nodes[-1], g)
        assert ("ct.astype(a, ct.tfloat32)" in launch.source.text) == (compute != "float32")
        direct = [line for line in launch.source.text.splitlines() if "ct.mma(" in line and "ones_below" not in line]
        assert len(direct) == 1  # dot()'s own: every product but the gate's cumulative sums goes through it
        outputs[compute] = emulated_executor().run(g, inputs)
        g, inputs = make(kind, CHUNK_EDGES, kd=16, vd=16)
        g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
        report = check(g, inputs, builder.name)
        assert report.passed, report.table()
    for compute in ("float16", "bfloat16"):
        assert any(not np.array_equal(outputs["float32"][n], outputs[compute][n]) for n in outputs["float32"])


@pytest.mark.parametrize(("kd", "vd", "planned"), [(256, 256, True), (257, 8, False), (8, 257, False)])
def test_head_dims_up_to_256_are_planned(kd, vd, planned) -> None:
    g, _ = delta_rule_graph("gdn", (3,), heads=1, kd=kd, vd=vd)
    if planned:
        assert CutileGdnBuilder().launches(g.nodes[-1], g)[0][0].grid == (1, 1, 1)
    else:
        with pytest.raises(NotSupported, match="head dims"):
            CutileGdnBuilder().check(g.nodes[-1], g)


@pytest.mark.parametrize("port", ["initial_state", "d_final_state"])
def test_a_float16_state_is_not_served(port) -> None:
    """States are float32 or bf16 (the kernel's state gathers and scatters); float16, an io dtype, is not one."""
    g, _ = delta_rule_backward_graph("gdn", (5,), state="float16" if port == "initial_state" else "float32")
    node = g.nodes[-1]
    if port == "d_final_state":
        g.tensors[node.op.ports()[port]].set_data_type("float16")
    builder = CutileGdnBwdBuilder()
    assert not builder.serves(sigdnn.key_for(node, g))
    with pytest.raises(NotSupported, match=f"port '{port}'.* is float16"):
        builder.check(node, g)
    g, _ = delta_rule_backward_graph("gdn", (5,))
    assert builder.serves(sigdnn.key_for(g.nodes[-1], g))
    assert not CutileGdnBuilder().serves(sigdnn.key_for(g.nodes[-1], g))  # another op's node


def test_the_forward_takes_flat_packed_views_and_no_workspace() -> None:
    """Each port a flat view of its whole buffer (stride 1); an absent initial state a one-element stand-in."""
    g, _ = delta_rule_graph("gdn", (5, 2), heads=2, kd=8, vd=4, state=None)
    (launch,), workspace = CutileGdnBuilder().launches(g.nodes[-1], g)
    assert workspace == 0
    views = {a.buffer: (a.shape, a.strides) for a in launch.args}
    assert views["q"] == ((7 * 2 * 8,), (1,)) and views["v"] == ((7 * 2 * 4,), (1,))
    assert all(strides == (1,) for _, strides in views.values())
    assert [a.shape for a in launch.args if a.buffer == "o"] == [(1,), (7 * 2 * 4,)]  # o standing in for h0, then o
