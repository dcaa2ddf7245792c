"""cuTile pooling and pooling_backward on the GPU against the reference, through sigdnn.validate.

The cases of tests/pooling_cases.py (every mode, 1 to 3 spatial dims, both
layouts, odd and size-1 dims, gapped inputs, ties / NaN / -inf for the max),
here compiled by cuTile and run on the device; the emulator runs the same
kernels' text in tests/plan_builders/cutile/test_emulated_pooling.py. A
planted bug (the last maximum instead of the first) must fail validation.
"""

from __future__ import annotations

import pytest
from pooling_cases import CASES, MODES, backward, forward, with_ties

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.plan_builders.cutile.pooling import CutilePoolingBackwardBuilder

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
@pytest.mark.parametrize("direction", ["forward", "backward"])
def test_pooling_matches_the_reference_on_the_gpu(case, mode, direction) -> None:
    graph = (forward if direction == "forward" else backward)(case, mode)
    seed = len(case.name) + len(mode)
    inputs = with_ties(graph, seed) if mode == "max" else random_inputs(graph, seed=seed)
    report = sigdnn.validate(graph, inputs, backend="gpu")
    builder = "cutile.pooling" if direction == "forward" else "cutile.pooling_backward"
    assert set(report.builders.values()) == {builder}, report.builders
    assert report.passed, report.table()


class LastMaximum(CutilePoolingBackwardBuilder):
    name = "planted.pooling_backward"
    engine_id = 30020
    library = "planted"

    def launches(self, node, graph):  # type: ignore[no-untyped-def]
        import attrs

        launches, nbytes = super().launches(node, graph)
        swap = lambda text: text.replace("(v > acc)", "(v >= acc)")  # noqa: E731 (the argmax modes' running best)
        return [attrs.evolve(la, source=attrs.evolve(la.source, text=swap(la.source.text))) for la in launches], nbytes


def test_a_planted_last_maximum_fails_validation_on_the_gpu() -> None:
    registry = sigdnn.Registry(entry_point_group=None)
    registry.register(LastMaximum())
    graph = backward(CASES[0], "max")
    executor = sigdnn.Executor("gpu", registry=registry, engine="planted.pooling_backward")
    assert not sigdnn.validate(graph, with_ties(graph, 5), executor=executor).passed
