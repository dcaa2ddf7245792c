"""cuTile copies for reshape / transpose / slice / concatenate on the GPU: bit-identical to the reference.

The strategy of tests/plan_builders/cutile/test_emulated_movement.py (random
ops, shapes, layouts with gaps, concatenates of differently laid out pieces),
here compiled by cuTile and run on the device.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from movement_cases import movement_graphs

import sigdnn
from sigdnn.accuracy.inputs import random_inputs

pytestmark = pytest.mark.gpu


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(movement_graphs(), st.integers(0, 1000))
def test_copies_on_the_gpu_are_bit_identical_to_the_reference(graph: sigdnn.Graph, seed: int) -> None:
    inputs = random_inputs(graph, seed=seed)
    executor = sigdnn.Executor("gpu")
    plan = executor.prepare(graph)
    assert [s.builder.name for s in plan.steps] == ["cutile.movement"]
    got = executor.execute(plan, inputs)
    for name, want in sigdnn.Executor().run(graph, inputs).items():
        np.testing.assert_array_equal(got[name], want)
