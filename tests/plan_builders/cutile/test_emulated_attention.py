"""cuTile attention forward through the emulator: against torch float64 attention and sigdnn.validate.

What the CuTe flash attention declines: float32, head dims 32 / 80 / 96 / 256 (q / k and v apart),
grouped and multi-query heads, the top-left causal mask with Sq != Skv, BSHD strides, the stats
output. Each case must pass validation against the reference and stay within a float32 bound of torch's
float64 attention; planted bugs in the kernel text must fail validation.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from attention_cases import CASES, Case, graph, torch_attention
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cutile import attention
from sigdnn.plan_builders.cutile.attention import CutileSdpaBuilder

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


class Planted(CutileSdpaBuilder):
    name = "planted.sdpa"
    engine_id = 30054
    library = "planted"
    plant = staticmethod(lambda text: text)

    def launches(self, node, graph):  # type: ignore[no-untyped-def]
        launches, nbytes = super().launches(node, graph)
        return [
            attrs.evolve(la, source=attrs.evolve(la.source, text=self.plant(la.source.text))) for la in launches
        ], nbytes


PLANTED = {
    "running_sum_not_rescaled": ("total = total * alpha + ", "total = total + ", CASES[0]),
    "accumulator_not_rescaled": ("acc = acc * alpha + pv", "acc = acc + pv", CASES[0]),
    "causal_diagonal_hidden": ("keep & (cols <= rows)", "keep & (cols < rows)", CASES[1]),
    "key_tail_kept": ("keep = cols < skv", "keep = cols < skv + 1", CASES[0]),
    "kv_head_by_query_head": ("kv = h // groups", "kv = h % groups", CASES[0]),
    "causal_steps_cut_short": ("ct.cdiv((i + 1) * TM, TN)", "ct.cdiv(i * TM, TN)", CASES[1]),
}


@pytest.mark.parametrize("bug", PLANTED)
def test_a_planted_bug_fails_validation(bug: str) -> None:
    old, new, case = PLANTED[bug]
    assert old in attention.kernel_source().text
    registry = sigdnn.Registry(entry_point_group=None)
    planted = Planted()
    planted.plant = staticmethod(lambda text: text.replace(old, new))
    registry.register(planted)
    g = graph(case)
    executor = emulated_executor(registry=registry, engine="planted.sdpa")
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
