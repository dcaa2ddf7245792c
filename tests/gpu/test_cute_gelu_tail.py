"""The GEMM epilogue's gelu on chosen inputs, from the far negative tail to large positives (Hopper GPU).

A 16-bit output takes the fast gelu (approximate exp2 and reciprocal,
rescaled so results that are subnormal in float32 survive), a float32
output the accurate one. Random GEMM outputs rarely leave [-10, 10], so
here A is a 0/1 selection matrix and C = A @ B copies rows of B: every
exact value of a grid over [-20, 12] (zero, the subnormal band near -13.5,
where gelu underflows) reaches the activation, and the result is judged at
the region's own tolerance against the float64 reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from cute_skip import skip_unless_sm90

import sigdnn
from sigdnn.accuracy.tolerances import step_tolerance
from sigdnn.dtypes import DataType, round_to
from sigdnn.validation import compare

pytestmark = pytest.mark.gpu


skip_unless_sm90("the CuTe GEMM")

M, K, N = 136, 64, 520  # every row of C holds N grid values; M off the 128 tile


def tail_graph(act: str, out_dtype: str) -> sigdnn.Graph:
    """act(a @ b + bias) with 16-bit operands (float16 for a float16 output, else bfloat16)."""
    io = "float16" if out_dtype == "float16" else "bfloat16"
    g = sigdnn.Graph("gelu_tail", io_dtype=io, compute_dtype="float32")
    y = g.matmul(g.tensor("a", (M, K)), g.tensor("b", (K, N)), name="mm")
    y = g.pointwise("add", y, g.tensor("bias", (1, N)), name="bias")
    g.pointwise(act, y, name="act").set_output(True).set_name("out").set_data_type(out_dtype)
    return g


@pytest.mark.parametrize("act", ["gelu_fwd", "gelu_approx_tanh_fwd"])
@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_gelu_epilogue_over_its_whole_range(act: str, dtype: str) -> None:
    g = tail_graph(act, dtype)
    dt = DataType("float16" if dtype == "float16" else "bfloat16")
    a = np.zeros((M, K))
    a[np.arange(M), np.arange(M) % K] = 1.0  # row m of C is row (m mod K) of B
    grid = np.concatenate([np.linspace(-20.0, 12.0, K * N - 64), np.linspace(-13.6, -13.0, 63), [0.0]])
    inputs = {
        "a": round_to(a, dt),
        "b": round_to(grid.reshape(K, N), dt),
        "bias": np.zeros((1, N), dt.numpy),
    }
    executor = sigdnn.Executor("gpu", engine="cute.matmul")
    plan = executor.prepare(g)
    assert [s.builder.name for s in plan.steps] == ["cute.matmul"]
    got = executor.execute(plan, inputs)["out"].astype(np.float64)
    want = sigdnn.Executor("reference", fusion=False).run(g, inputs)["out"].astype(np.float64)
    tolerance = step_tolerance(g, list(g.nodes), g.tensor_by_name("out").uid)
    terms = np.abs(inputs["a"].astype(np.float64)) @ np.abs(inputs["b"].astype(np.float64))
    result = compare("out", got, want, tolerance, terms)
    assert result.passed, result
    # the tail really was exercised: subnormal-range inputs gave nonzero results where the reference has them
    tiny = (np.abs(want) > 0) & (np.abs(want) < np.finfo(np.float32).tiny)
    assert dtype == "float16" or tiny.any()
