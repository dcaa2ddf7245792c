"""sigdnn.allow_tf32: which nodes may run as TF32 (compute float16) and which keep their compute dtype."""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.dtypes import DataType


def mixed_graph() -> sigdnn.Graph:
    """Dot products of every kind beside nodes that are not one."""
    g = sigdnn.Graph("mixed", io_dtype="float32", compute_dtype="float32")
    a, b = g.tensor("a", (4, 8)), g.tensor("b", (8, 3))
    g.matmul(a, b, name="f32_matmul")
    h1, h2 = g.tensor("h1", (4, 8)).set_data_type("bfloat16"), g.tensor("h2", (8, 3)).set_data_type("bfloat16")
    g.matmul(h1, h2, name="bf16_matmul")
    g.matmul(h1, b, name="bf16_x_f32_matmul")
    g.matmul(a, b, name="already_16_bit", compute_dtype="bfloat16")
    g.matmul(a, b, name="float64_compute", compute_dtype="float64")
    x, w = g.tensor("x", (1, 2, 5, 5)), g.tensor("w", (3, 2, 3, 3))
    y = g.conv_fprop(x, w, padding=(1, 1), name="conv")
    g.conv_dgrad(y, w, padding=(1, 1), dims=(1, 2, 5, 5), name="dgrad")
    g.conv_wgrad(x, y, padding=(1, 1), dims=(3, 2, 3, 3), name="wgrad")
    g.pointwise("relu_fwd", a, name="relu")
    read = {u for n in g.nodes for u in n.op.inputs().values()}
    for uid in {u for n in g.nodes for u in n.op.outputs().values()} - read:
        g.tensors[uid].set_output(True)
    return g


def test_float32_dot_products_computing_in_float32_get_tf32s_precision() -> None:
    g = mixed_graph()
    changed = sigdnn.allow_tf32(g)
    assert changed == ["f32_matmul", "bf16_x_f32_matmul", "conv", "dgrad", "wgrad"]
    compute = {n.name: g.compute_dtype_of(n) for n in g.nodes}
    assert {n for n, c in compute.items() if c == DataType.FLOAT16} == set(changed)
    assert compute["bf16_matmul"] == compute["relu"] == DataType.FLOAT32
    assert compute["already_16_bit"] == DataType.BFLOAT16 and compute["float64_compute"] == DataType.FLOAT64
    assert g.compute_dtype == DataType.FLOAT32  # the graph's own, and so every virtual tensor's dtype, unchanged
    assert sigdnn.allow_tf32(g) == []  # a second call finds nothing left to change


def test_it_survives_serialization_and_only_widens_tolerances() -> None:
    """The compute dtype travels with the node, and the reference's result does not change (it computes in
    float64 whatever the compute dtype says)."""
    g = mixed_graph()
    inputs = {t.name: np.random.default_rng(0).standard_normal(t.dims).astype(g.dtype_of(t).numpy) for t in g.inputs}
    before = sigdnn.Executor().run(mixed_graph(), inputs)
    sigdnn.allow_tf32(g)
    back = sigdnn.deserialize(g.serialize())
    assert [back.compute_dtype_of(n) for n in back.nodes] == [g.compute_dtype_of(n) for n in g.nodes]
    after = sigdnn.Executor().run(back, inputs)
    for name, value in before.items():
        np.testing.assert_array_equal(after[name], value)


def test_a_planned_graph_is_not_changed() -> None:
    g = mixed_graph()
    sigdnn.Executor().prepare(g)
    with pytest.raises(sigdnn.GraphFrozenError):
        sigdnn.allow_tf32(g)
