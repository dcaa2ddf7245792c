"""Validation's bound for the delta rules at bf16 and TF32 products, against the emulated kernels' hardest case.

The compute dtype rounds only the products' operands (docs/ops.md), so the
bound is 4 ulps of the compute dtype of the normwise sum|terms| plus a
float32 accumulation term (``accuracy.tolerances``), where the general rule,
4 sqrt(T) ulps, allowed more than the largest output past a few thousand
tokens at bf16. With beta = 1 and no decay every token's correction is whole
and the state forgets nothing: the emulated kernels, whose operands round as
the GPU's, come closest to the bound there (about 1 ulp), and still validate.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from delta_rule_cases import delta_rule_backward_graph, delta_rule_graph
from delta_rule_checks import check
from emulated import emulated_executor, make_available

import sigdnn


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("compute", ["bfloat16", "float16"])
def test_whole_corrections_and_no_decay_validate(kind, backward, compute) -> None:
    make = delta_rule_backward_graph if backward else delta_rule_graph
    g, inputs = make(kind, (1, 63, 64, 65, 700), kd=32, vd=32)
    g.nodes[-1].compute_dtype = sigdnn.DataType(compute)
    inputs = {**inputs, "g": np.zeros_like(inputs["g"]), "beta": np.ones_like(inputs["beta"])}
    report = check(g, inputs, f"cutile.{kind}" + "_bwd" * backward)
    assert report.passed, report.table()


def test_the_linear_attention_campaign_makes_its_cases_and_its_small_ones_validate() -> None:
    """examples/campaigns/linear_attention.toml: 24 cases within the GPU's limits (gdn and kda, float32 and bf16
    products, three shapes, two seeds), none skipped, labelled apart by compute dtype; its small shape (4 heads of
    64, sequences of 1, 1, 2, 130 and 17 tokens) validates on the emulated kernels at either compute dtype."""
    from sigdnn.campaign.cases import generate_cases
    from sigdnn.campaign.spec import parse_spec
    from sigdnn.graph.limits import GPU_LIMITS

    path = Path(__file__).resolve().parents[3] / "examples" / "campaigns" / "linear_attention.toml"
    plan = generate_cases(parse_spec(path.read_text(), path.parent), limits=GPU_LIMITS)
    assert plan.skipped == () and len(plan.cases) == 24
    assert len({(c.recipe.label(), c.seed) for c in plan.cases}) == 24
    small = [c for c in plan.cases if c.recipe.shape[0] == 4 and c.seed == 0]
    assert sorted((c.recipe.op, c.recipe.compute_dtype or "") for c in small) == [
        ("gdn", ""), ("gdn", "bfloat16"), ("kda", ""), ("kda", "bfloat16")
    ]  # fmt: skip
    for case in small:
        graph = sigdnn.deserialize(case.graph)
        assert graph.compute_dtype_of(graph.nodes[0]) == sigdnn.DataType(case.recipe.compute_dtype or "float32")
        report = sigdnn.validate(graph, seed=case.seed, executor=emulated_executor(), truth="cpu")
        assert set(report.builders.values()) == {f"cutile.{case.recipe.op}"}, report.builders
        assert report.passed, (case.recipe.label(), report.table())
