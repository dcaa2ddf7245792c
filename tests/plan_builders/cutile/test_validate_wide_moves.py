"""Validation moves a region's inputs by their error bounds in float64; tabulated reference ops must take them.

The reference evaluates a unary op on a 16-bit input through a table of its
results on every bit pattern once an output has 65536 elements or more.
Validation's carried-error runs (``step_reference._carry_errors``) feed the same
plan inputs moved by their bounds, in float64, which no table indexes: the
op must compute those from the values. Found on the H200: every float16 /
bfloat16 fused region with a tanh over 132,000 elements failed to validate
with a NumPy error instead of a verdict.
"""

from __future__ import annotations

import pytest
from emulated import emulated_executor, make_available

import sigdnn


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_large_16_bit_region_with_a_tabulated_op_validates(dtype: str) -> None:
    g = sigdnn.Graph("block", io_dtype=dtype, intermediate_dtype=dtype, compute_dtype="float32")
    x, y = g.tensor("x", dims=(4, 33, 1000)), g.tensor("y", dims=(4, 33, 1000))
    m = g.pointwise("mul", g.pointwise("add", x, y, name="add"), g.tensor("bias", dims=(1, 33, 1)), name="mul")
    g.pointwise("tanh_fwd", g.pointwise("relu_fwd", m, name="relu"), name="tanh").set_output(True).set_name("out")
    ex = emulated_executor()
    assert len(ex.prepare(g).steps) == 1  # one fused region, whose exit is judged with carried errors
    report = sigdnn.validate(g, seed=3, executor=ex)
    assert report.passed, report.table()
