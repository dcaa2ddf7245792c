"""validate's rule for attention's scores: a device's scores are off by their own accumulation error.

A float32 score q.k sums D products, so a device's is off by about
sqrt(D) ulps of float32 times the sum of their magnitudes; the softmax
turns that absolute error into a relative one of each weight, so at logits
in the hundreds or thousands o and the logsumexp move far more than their
own rounding, however exactly the kernel works. The NumPy flash-attention
forward of ``test_sdpa_rounded_weights`` (float32 throughout here: rounding
p to float32 is no rounding) stands in for a GPU kernel; its o failed
before the rule. A 0.1 % scale or the wrong kv head must still fail.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from test_sdpa_rounded_weights import FlashSdpa

import sigdnn
from sigdnn.accuracy.step_reference import run_reference
from sigdnn.accuracy.tolerances import node_tolerance
from sigdnn.graph.ops.sdpa import Sdpa
from sigdnn.registry import Registry
from sigdnn.runtime.device import ExecutionContext
from sigdnn.validation import validate

EPS32 = 2.0**-23
D = 64


def graph(bias: bool = False, scale: float = 1 / math.sqrt(D)) -> sigdnn.Graph:
    g = sigdnn.Graph("attn", io_dtype="float32", compute_dtype="float32")
    q = g.tensor("q", (1, 4, 48, D))
    k, v = g.tensor("k", (1, 2, 96, D)), g.tensor("v", (1, 2, 96, D))
    mask = g.tensor("bias", (1, 1, 48, 96)) if bias else None
    o, stats = g.sdpa(q, k, v, scale, mask, False, True, name="sdpa")
    o.set_output(True).set_name("o")
    stats.set_output(True).set_name("stats")
    return g


def inputs(magnitude: float, seed: int = 4) -> dict[str, np.ndarray]:
    """q and k of up to ``magnitude`` (logits of about magnitude**2 * 3), v in [-2, 2)."""
    rng = np.random.default_rng(seed)
    return {
        "q": (rng.uniform(-1, 1, (1, 4, 48, D)) * magnitude).astype(np.float32),
        "k": (rng.uniform(-1, 1, (1, 2, 96, D)) * magnitude).astype(np.float32),
        "v": rng.uniform(-2, 2, (1, 2, 96, D)).astype(np.float32),
    }


def run(magnitude: float, **plan: Any) -> sigdnn.validation.ValidationReport:
    registry = Registry(entry_point_group=None)
    registry.register(FlashSdpa(**plan))
    return validate(graph(), inputs(magnitude), executor=sigdnn.Executor(registry=registry))


@pytest.mark.parametrize("magnitude", [2.0, 12.0, 40.0])
def test_an_exact_float32_kernel_passes_at_any_logits(magnitude: float) -> None:
    report = run(magnitude)
    assert report.passed, report.table()


def test_without_the_rule_the_exact_kernel_fails_at_large_logits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Sdpa, "scored", {})
    assert run(2.0).passed  # logits of a few units: the output's own bounds were enough
    report = run(40.0)
    assert {c.comparison.name for c in report.failures} == {"o"}, report.table()  # stats' rtol * |stats| holds


@pytest.mark.parametrize("magnitude", [2.0, 40.0])
def test_a_scale_a_tenth_of_a_percent_off_fails(magnitude: float) -> None:
    assert not run(magnitude, scale_error=1.001).passed


def test_the_wrong_kv_head_fails() -> None:
    report = run(40.0, one_kv_head=True)
    assert "o" in [c.comparison.name for c in report.failures], report.table()


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_the_rule_by_hand(sign: float) -> None:
    """o: 2 * 4 sqrt(D) eps * |scale| D max|q| max|k| * max|v|; stats: half that coefficient, no max|v|."""
    g = graph(scale=sign / math.sqrt(D))
    (node,) = g.nodes
    uids = node.op.outputs()
    assert node_tolerance(g, node, uids["o"]).scores == 2 * 4 * math.sqrt(D) * EPS32
    assert node_tolerance(g, node, uids["stats"]).scores == 4 * math.sqrt(D) * EPS32
    data = inputs(12.0)
    truth = reference_step(g, data)
    score_terms = D / math.sqrt(D) * float(np.abs(data["q"]).max()) * float(np.abs(data["k"]).max())
    stats_bound = 4 * math.sqrt(D) * EPS32 * score_terms
    np.testing.assert_allclose(truth.carried[uids["stats"]], stats_bound, rtol=1e-12)
    np.testing.assert_allclose(truth.carried[uids["o"]], 2 * stats_bound * float(np.abs(data["v"]).max()), rtol=1e-12)


def test_an_additive_mask_does_not_enter_the_bound() -> None:
    """A -1e9 mask holds no weight: counting it would allow any o."""
    plain, masked = graph(), graph(bias=True)
    data = inputs(12.0)
    mask = np.where(np.arange(96)[None, :] <= np.arange(48)[:, None], 0.0, -1e9).astype(np.float32)
    with_mask = reference_step(masked, {**data, "bias": mask.reshape(1, 1, 48, 96)})
    without = reference_step(plain, data)
    for port in ("o", "stats"):
        uid_plain, uid_masked = plain.nodes[0].op.outputs()[port], masked.nodes[0].op.outputs()[port]
        np.testing.assert_array_equal(with_mask.carried[uid_masked], without.carried[uid_plain])


def reference_step(g: sigdnn.Graph, data: dict[str, np.ndarray]) -> Any:
    """The reference's side of the graph's one step, fed ``data``."""
    plan = sigdnn.Executor("reference").prepare(g)
    (node,) = g.nodes
    step = SimpleNamespace(nodes=(node,), reads=(), writes=tuple(node.op.outputs().values()))
    return run_reference(g, step, {node.name: plan.steps[0]}, data, {}, {}, ExecutionContext())
