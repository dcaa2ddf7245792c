"""cuTile resample forward and backward on the GPU against the reference, through sigdnn.validate.

The cases of tests/resample_cases.py (every mode and coordinate convention,
1 to 3 spatial dims, both layouts, size-1 dims, a gapped input), compiled by
cuTile; tests/plan_builders/cutile/test_emulated_resample.py runs the same
kernel text in the emulator.
"""

from __future__ import annotations

import pytest
from resample_cases import CASES, CONVENTIONS, backward_graph, graph

import sigdnn
from sigdnn.accuracy.inputs import random_inputs

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mode, coordinates", CONVENTIONS, ids=["-".join(c) for c in CONVENTIONS])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_resample_matches_the_reference_on_the_gpu(case, mode: str, coordinates: str) -> None:
    g = graph(case, mode, coordinates)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), backend="gpu")
    assert set(report.builders.values()) == {"cutile.resample"}, report.builders
    assert report.passed, report.table()


@pytest.mark.parametrize("mode, coordinates", CONVENTIONS, ids=["-".join(c) for c in CONVENTIONS])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_resample_backward_matches_the_reference_on_the_gpu(case, mode: str, coordinates: str) -> None:
    g = backward_graph(case, mode, coordinates)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), backend="gpu")
    assert set(report.builders.values()) == {"cutile.resample_backward"}, report.builders
    assert report.passed, report.table()
