"""validate's rule for attention's scores: a device's scores are off by their own accumulation error.

A float32 score q.k sums D products, so a device's is off by about a dot
product's accumulation error; the softmax turns that absolute error into a
relative one of every weight, so at logits in the hundreds or thousands o,
the logsumexp and the gradients move far more than their own rounding,
however exactly the kernel works. Validation measures how far: the
reference runs again with q and k moved by 4 sqrt(D) ulps relatively, with
random signs. NumPy flash-attention kernels (``test_sdpa_rounded_weights``,
``test_sdpa_backward_rounded_operands``; float32 throughout here, so
rounding p or ds to the input dtype is no rounding) stand in for GPU
kernels: exact float32 arithmetic failed before the rule; a 0.1 % scale,
the wrong kv head or a dropped mask must still fail.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from test_sdpa_backward_rounded_operands import FlashSdpaBackward
from test_sdpa_rounded_weights import FlashSdpa

import sigdnn
from sigdnn.accuracy.arrays import HOST
from sigdnn.accuracy.step_reference import run_reference
from sigdnn.accuracy.tolerances import node_tolerance
from sigdnn.dtypes import DataType, round_to
from sigdnn.graph.ops.sdpa import Sdpa
from sigdnn.graph.ops.sdpa_backward import SdpaBackward
from sigdnn.plan_builders.reference.math.sdpa import sdpa as reference_sdpa
from sigdnn.registry import PlanBuilder, Registry
from sigdnn.runtime.device import ExecutionContext
from sigdnn.validation import validate

EPS32 = 2.0**-23
D = 64
SHAPES = {"q": (1, 4, 48, D), "k": (1, 2, 96, D), "v": (1, 2, 96, D), "d_o": (1, 4, 48, D)}


def forward(causal: bool = False) -> sigdnn.Graph:
    g = sigdnn.Graph("attn", io_dtype="float32", compute_dtype="float32")
    q, k, v = (g.tensor(n, SHAPES[n]) for n in "qkv")
    o, stats = g.sdpa(q, k, v, 1 / math.sqrt(D), None, causal, True, name="sdpa")
    o.set_output(True).set_name("o")
    stats.set_output(True).set_name("stats")
    return g


def backward(causal: bool = False) -> sigdnn.Graph:
    g = sigdnn.Graph("attn_bwd", io_dtype="float32", compute_dtype="float32")
    q, k, v, d_o = (g.tensor(n, SHAPES[n]) for n in ("q", "k", "v", "d_o"))
    o = g.tensor("o", SHAPES["q"])
    stats = g.tensor("stats", (1, 4, 48, 1))
    for name, t in zip(("dq", "dk", "dv"), g.sdpa_backward(q, k, v, o, d_o, stats, 1 / math.sqrt(D), None, causal)):
        t.set_output(True).set_name(name)
    return g


def inputs(g: sigdnn.Graph, magnitude: float, seed: int = 4) -> dict[str, np.ndarray]:
    """q and k uniform in +-``magnitude`` (logits up to about magnitude**2 * 2), v and d_o in [-2, 2); for the
    backward, o and stats the reference forward's."""
    rng = np.random.default_rng(seed)
    data = {n: (rng.uniform(-1, 1, SHAPES[n]) * magnitude).astype(np.float32) for n in "qk"}
    data |= {n: rng.uniform(-2, 2, SHAPES[n]).astype(np.float32) for n in ("v", "d_o")}
    if g.name == "attn":
        return {n: data[n] for n in "qkv"}
    op = g.nodes[0].op
    wide = (data[n].astype(np.float64) for n in "qkv")
    o, stats = reference_sdpa(*wide, op.attn_scale, None, op.use_causal_mask, True)
    return data | {"o": round_to(o, DataType.FLOAT32), "stats": round_to(stats, DataType.FLOAT32)}


def single(builder: PlanBuilder) -> Registry:
    registry = Registry(entry_point_group=None)
    registry.register(builder)
    return registry


def run(g: sigdnn.Graph, magnitude: float, builder: PlanBuilder) -> sigdnn.validation.ValidationReport:
    return validate(g, inputs(g, magnitude), executor=sigdnn.Executor(registry=single(builder)))


KERNELS = {"forward": (forward, FlashSdpa), "backward": (backward, FlashSdpaBackward)}


@pytest.mark.parametrize("kind", list(KERNELS))
@pytest.mark.parametrize("magnitude", [2.0, 12.0, 40.0])
@pytest.mark.parametrize("causal", [False, True])
def test_an_exact_float32_kernel_passes_at_any_logits(kind: str, magnitude: float, causal: bool) -> None:
    graph, kernel = KERNELS[kind]
    report = run(graph(causal), magnitude, kernel())
    assert report.passed, report.table()


@pytest.mark.parametrize("kind", list(KERNELS))
def test_without_the_rule_the_exact_kernel_fails_at_large_logits(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    graph, kernel = KERNELS[kind]
    monkeypatch.setattr(Sdpa if kind == "forward" else SdpaBackward, "score_operands", ())
    assert run(graph(), 2.0, kernel()).passed  # logits of a few units: the outputs' own bounds were enough
    assert not run(graph(), 40.0, kernel()).passed


@pytest.mark.parametrize("kind", list(KERNELS))
@pytest.mark.parametrize("magnitude", [2.0, 40.0])
def test_a_scale_a_tenth_of_a_percent_off_fails(kind: str, magnitude: float) -> None:
    graph, kernel = KERNELS[kind]
    assert not run(graph(), magnitude, kernel(scale_error=1.001)).passed


@pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_the_wrong_kv_head_and_a_dropped_mask_fail() -> None:
    """(A dropped mask at these logits overflows the kernel's exp: the infinities are the failure.)"""
    assert not run(forward(), 40.0, FlashSdpa(one_kv_head=True)).passed
    assert not run(backward(causal=True), 40.0, FlashSdpaBackward(drop_mask=True)).passed


def allowance(g: sigdnn.Graph, data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The rule's allowance per output of the graph's one node, by name."""
    plan = sigdnn.Executor("reference").prepare(g)
    (node,) = g.nodes
    step = SimpleNamespace(nodes=(node,), reads=(), writes=tuple(node.op.outputs().values()))
    truth = run_reference(g, step, {node.name: plan.steps[0]}, data, {}, {}, ExecutionContext())
    return {g.tensors[uid].name: truth.carried[uid] for uid in step.writes}


def test_the_moves_are_four_sqrt_d_ulps() -> None:
    g = forward()
    (node,) = g.nodes
    for uid in node.op.outputs().values():
        assert node_tolerance(g, node, uid).scores == 4 * math.sqrt(D) * EPS32


@pytest.mark.parametrize("kind", list(KERNELS))
def test_the_allowance_follows_the_logits_and_stays_near_the_real_error(kind: str) -> None:
    """Small where the exact kernel is accurate (validation's own draw: under 4x the accumulation bound it adds
    to), large where it is not, and at most a few hundred times the exact kernel's error (measured: 12-80x, as
    the accumulation bound's 4 sqrt(K) ulps are to a sum's typical error)."""
    graph, kernel = KERNELS[kind]
    g = graph()
    (node,) = g.nodes
    for magnitude in (2.0, 40.0):
        data = inputs(g, magnitude)
        truth = sigdnn.Executor("reference").run(g, data)
        exact = sigdnn.Executor(registry=single(kernel())).run(g, data)
        for name, extra in allowance(g, data).items():
            uid = next(u for u, t in g.tensors.items() if t.name == name)
            error = np.abs(exact[name].astype(np.float64) - truth[name]).max()
            basis = data["v"] if name == "o" else truth[name]  # o averages v: max|v| bounds its sum|terms|
            accumulation = node_tolerance(g, node, uid).reduction * np.abs(basis).max()
            if magnitude == 2.0 and name != "stats":
                assert extra.max() < 4 * accumulation, name
            if magnitude == 40.0:
                assert error < extra.max() < 300 * error, (name, error, extra.max())


def test_the_allowance_by_hand() -> None:
    """One query, two keys, D 1: moving q and k_j by c r (signs r, c = 4 ulps) moves s_j = q k_j by
    s_j (r_q + r_kj) c, the logsumexp by sum_j p_j ds_j and o = p1 v1 + p2 v2 by p1 p2 (ds1 - ds2)(v1 - v2)."""
    g = sigdnn.Graph("tiny", io_dtype="float32", compute_dtype="float32")
    q, k, v = g.tensor("q", (1, 1, 1, 1)), g.tensor("k", (1, 1, 2, 1)), g.tensor("v", (1, 1, 2, 1))
    o, stats = g.sdpa(q, k, v, 1.0, None, False, True, name="sdpa")
    o.set_output(True).set_name("o")
    stats.set_output(True).set_name("stats")
    data = {
        n: np.array(x, np.float32).reshape(t.dims) for n, x, t in (("q", 3, q), ("k", [2, 1.5], k), ("v", [1, -1], v))
    }
    c = 4 * EPS32
    r_q = HOST.random_signs(q.uid, (1, 1, 1, 1)).item()
    r_k = HOST.random_signs(k.uid, (1, 1, 2, 1)).ravel()
    s = np.array([6.0, 4.5])
    p = np.exp(s - s.max()) / np.exp(s - s.max()).sum()
    ds = s * (r_q + r_k) * c
    assert np.any(ds != 0)
    got = allowance(g, data)
    np.testing.assert_allclose(got["stats"], abs(p @ ds), rtol=1e-3)
    np.testing.assert_allclose(got["o"], abs(p[0] * p[1] * (ds[0] - ds[1]) * 2), rtol=1e-3)
