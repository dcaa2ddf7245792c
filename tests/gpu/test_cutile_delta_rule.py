"""cuTile gdn / kda forward and backward on the GPU against the float64 recurrence, through sigdnn.validate.

The emulated tests (tests/plan_builders/cutile/test_emulated_delta_rule.py)
run the same kernel text on the CPU; here cuTile compiles it: lengths around
the chunk, mixed lengths at the benchmark's head dims, 150 sequences (the
walks' ranking over several blocks), and bf16 products (the forward's
ready-made operands, kda's bf16 selections in the backward).
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


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize(("lengths", "heads", "dims"), [(CHUNK_EDGES, 2, 8), ((1000, 37, 3000, 64), 16, 128)])
def test_bf16_products_on_the_gpu(kind, backward, lengths, heads, dims) -> None:
    """A bfloat16 compute dtype: the forward's walk reads its operands ready-made (a launch of their own), the
    backward selects kda's reference rows by bf16 MMAs; both as cuTile compiles them."""
    make = delta_rule_backward_graph if backward else delta_rule_graph
    g, inputs = make(kind, lengths, heads=heads, kd=dims, vd=dims)
    g.nodes[-1].compute_dtype = sigdnn.DataType("bfloat16")
    report = sigdnn.validate(g, inputs, backend="gpu")
    assert report.builders == {"n": f"cutile.{kind}" + "_bwd" * backward}
    assert report.passed, report.table()
