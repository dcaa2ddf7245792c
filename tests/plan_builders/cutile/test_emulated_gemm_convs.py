"""The GEMM convs through the emulator, each on the cases it takes: ``cutile.conv_fprop_1x1`` (1x1 convs as
GEMMs over views) and ``cutile.conv_fprop_im2col`` (A gathered once into the workspace, then the GEMM kernel).

Small-integer inputs must give torch's float64 conv rounded once to y's dtype bit for bit (every float32 sum of
them is exact); normal inputs must stay within float32 summation's bound and pass ``sigdnn.validate``. What is
particular to each builder (views, workspace, declines, rank) is in test_emulated_conv_1x1.py and
test_emulated_conv_im2col.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from conv_1x1_cases import CASES as ONE_BY_ONE
from conv_1x1_cases import im2col_cases
from conv_grouped_cases import exact_inputs, graph, rounded_oracle, within_float32_bound
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.plan_builders.cutile.matmul_codegen import MatmulConfig

CASES = [("cutile.conv_fprop_1x1", c) for c in ONE_BY_ONE] + [("cutile.conv_fprop_im2col", c) for c in im2col_cases()]
IDS = [f"{builder.rsplit('_', 1)[1]}-{case.name}" for builder, case in CASES]


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: None)
    monkeypatch.setattr(cutile_matmul, "CONFIGS", (MatmulConfig(16, 32, 16, 2),))  # 16-bit: partial tiles everywhere


def run(builder: str, g: sigdnn.Graph, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """y of ``g`` with its one step on ``builder``."""
    executor = emulated_executor(engine=builder)
    plan = executor.prepare(g)
    assert [s.builder.name for s in plan.steps] == [builder]
    return executor.execute(plan, inputs)["conv::y"]


@pytest.mark.parametrize(("builder", "case"), CASES, ids=IDS)
def test_small_integers_give_torchs_conv_rounded_once(builder, case) -> None:
    g = graph(case)
    inputs = exact_inputs(g, seed=len(case.name))
    want = rounded_oracle(case, inputs["x"], inputs["w"])
    np.testing.assert_array_equal(run(builder, g, inputs).astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize(("builder", "case"), CASES, ids=IDS)
def test_normal_inputs_stay_within_float32_summation_and_validate(builder, case) -> None:
    g = graph(case)
    inputs = random_inputs(g, seed=3 + len(case.name))
    assert within_float32_bound(case, run(builder, g, inputs), inputs["x"], inputs["w"]).all()
    report = sigdnn.validate(g, inputs, executor=emulated_executor(engine=builder))
    assert report.passed, report.table()
