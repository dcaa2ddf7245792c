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

import numpy as np
import pytest
from delta_rule_cases import delta_rule_backward_graph, delta_rule_graph
from delta_rule_checks import check
from emulated import make_available

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
