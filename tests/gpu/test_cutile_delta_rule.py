"""cuTile gdn / kda forward and backward on the GPU against the float64 recurrence, through sigdnn.validate.

The emulated tests (tests/plan_builders/cutile/test_emulated_delta_rule.py)
run the same kernel text on the CPU; here cuTile compiles it: lengths around
the chunk, mixed lengths at the benchmark's head dims, 150 sequences (the
walks' ranking over several blocks).
"""

from __future__ import annotations

import pytest
from delta_rule_cases import CHUNK_EDGES, MANY_LENGTHS, delta_rule_backward_graph, delta_rule_graph

import sigdnn

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(
    ("lengths", "heads", "dims"),
    [(CHUNK_EDGES, 2, 8), ((1000, 37, 3000, 64), 16, 128), ((4096,) * 2, 32, 128), (MANY_LENGTHS, 2, 16)],
)
def test_the_chunked_kernel_on_the_gpu(kind, lengths, heads, dims) -> None:
    g, inputs = delta_rule_graph(kind, lengths, heads=heads, kd=dims, vd=dims)
    report = sigdnn.validate(g, inputs, backend="gpu")
    assert report.builders == {"n": f"cutile.{kind}"}
    assert report.passed, report.table()


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(
    ("lengths", "heads", "dims"), [(CHUNK_EDGES, 2, 8), ((1000, 37, 3000, 64), 16, 128), (MANY_LENGTHS, 2, 16)]
)
def test_the_chunked_backward_on_the_gpu(kind, lengths, heads, dims) -> None:
    g, inputs = delta_rule_backward_graph(kind, lengths, heads=heads, kd=dims, vd=dims)
    report = sigdnn.validate(g, inputs, backend="gpu")
    assert report.builders == {"n": f"cutile.{kind}_bwd"}
    assert report.passed, report.table()
