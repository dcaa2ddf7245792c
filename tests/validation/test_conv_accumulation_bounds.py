"""The three convolutions are sums of products, as their shared window declaration says: validation bounds a
conv's accumulation by its |terms| run, and fp8 operands add the fp8 accumulator's error, for each of them."""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.step_reference import run_reference
from sigdnn.accuracy.tolerances import node_tolerance
from sigdnn.registry.registry import REFERENCE_ONLY
from sigdnn.runtime.device import ExecutionContext


def conv(kind: str, dtype: str = "float32") -> sigdnn.Graph:
    """One small conv of ``kind`` with inputs of ``dtype`` and a float32 output."""
    g = sigdnn.Graph(kind, io_dtype=dtype, compute_dtype="float32")
    if kind == "conv_fprop":
        y = g.conv_fprop(g.tensor("x", (1, 2, 4, 4)), g.tensor("w", (3, 2, 2, 2)), name="conv")
    elif kind == "conv_dgrad":
        y = g.conv_dgrad(g.tensor("dy", (1, 3, 3, 3)), g.tensor("w", (3, 2, 2, 2)), dims=(1, 2, 4, 4), name="conv")
    else:
        y = g.conv_wgrad(g.tensor("x", (1, 2, 4, 4)), g.tensor("dy", (1, 3, 3, 3)), dims=(3, 2, 2, 2), name="conv")
    y.set_output(True).set_name("out").set_data_type("float32")
    return g


@pytest.mark.parametrize("kind", ["conv_fprop", "conv_dgrad", "conv_wgrad"])
def test_a_conv_steps_accumulation_bound_is_the_conv_of_the_absolute_operands(kind: str) -> None:
    g = conv(kind)
    rng = np.random.default_rng(7)
    inputs = {t.name: rng.uniform(-2, 2, t.dims).astype(np.float32) for t in g.inputs}
    reference = sigdnn.Executor("reference", fusion=False, registry=REFERENCE_ONLY)
    plan = reference.prepare(g)
    plans = {s.node.name: s for s in plan.steps}
    truth = run_reference(g, plan.steps[0], plans, inputs, {}, {}, ExecutionContext())
    absolute = reference.execute(plan, {name: np.abs(a) for name, a in inputs.items()})["out"]
    out = g.outputs[0].uid
    np.testing.assert_array_equal(truth.sums[out], np.asarray(absolute, dtype=np.float64))


@pytest.mark.parametrize("kind", ["conv_fprop", "conv_dgrad", "conv_wgrad"])
def test_fp8_operands_widen_a_convs_tolerance_by_the_accumulators_error(kind: str) -> None:
    """Inputs of fp8 against float16 on the same dims, output and compute dtype: only the accumulator differs."""
    wide, narrow = conv(kind, "fp8_e4m3"), conv(kind, "float16")
    fp8 = node_tolerance(wide, wide.nodes[0], wide.outputs[0].uid)
    f16 = node_tolerance(narrow, narrow.nodes[0], narrow.outputs[0].uid)
    assert fp8.reduction > f16.reduction and (fp8.rtol, fp8.atol) == (f16.rtol, f16.atol)
