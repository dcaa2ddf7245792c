"""cuTile attention forward on the GPU: the emulator's cases (tests/plan_builders/cutile/test_emulated_attention.py)
compiled by cuTile, plus attention at transformer sizes the CuTe flash attention declines (float32; head dim
80), each through sigdnn.validate."""

from __future__ import annotations

import pytest
from attention_cases import CASES, Case, backward_graph, consistent_backward_inputs, graph

import sigdnn
from sigdnn.accuracy.inputs import random_inputs

pytestmark = pytest.mark.gpu

BUILDER = "cutile.sdpa"


CASES_AT_SIZE = [*CASES, Case("f32_d80_seq1024", 2, 8, 8, 1024, 1024, 80, 80, "float32", True, True),
                 Case("bf16_d80_gqa_seq2048", 1, 16, 4, 2048, 2048, 80, 80, "bfloat16", True, False, bshd=True)]  # fmt: skip


@pytest.mark.parametrize("case", CASES_AT_SIZE, ids=lambda c: c.name)
def test_attention_matches_the_reference_on_the_gpu(case: Case) -> None:
    g = graph(case)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=sigdnn.Executor("gpu"))
    assert set(report.builders.values()) == {BUILDER}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize("case", CASES_AT_SIZE, ids=lambda c: c.name)
def test_attention_backward_matches_the_reference_on_the_gpu(case: Case) -> None:
    g = backward_graph(case)
    report = sigdnn.validate(g, consistent_backward_inputs(case, seed=3), executor=sigdnn.Executor("gpu"))
    assert set(report.builders.values()) == {"cutile.sdpa_backward"}, report.builders
    assert report.passed, report.table()
