"""Validation's own arithmetic: every tolerance pinned to numbers worked by hand from the documented formulas.

node:   atol = 2 * smallest subnormal(out), rtol = eps(out) + 4 eps(compute),
        reduction = 4 sqrt(K) eps(compute) when K > 1 terms are accumulated (else 0); an op whose compute
        dtype rounds only its products' operands (the gated delta rules) sums at float32's epsilon (or the
        compute dtype's, where finer) and adds 4 eps(compute): 4 sqrt(K) min(eps(compute), eps32) + 4 eps(compute);
        integer outputs are exact.
step:   the producer's tolerance plus the reduction terms of the other float nodes of the region; their rtol
        summed as ``inner`` (validate carries their errors to the exit instead, when it can).
output: rtol = sum of every float node's rtol + eps(out), reduction = their sum,
        atol = rtol sqrt(max K) / 100 + 2 * smallest subnormal(out).
"""

from __future__ import annotations

import math

import pytest

import sigdnn
from sigdnn.accuracy.tolerances import (
    Tolerance,
    epsilon,
    node_tolerance,
    output_tolerance,
    output_tolerances,
    reduction_length,
    step_tolerance,
    tiniest,
)
from sigdnn.dtypes import DataType

EPS = {
    DataType.FLOAT64: 2.0**-52,
    DataType.FLOAT32: 2.0**-23,
    DataType.FLOAT16: 2.0**-10,
    DataType.BFLOAT16: 2.0**-7,
    DataType.FP8_E4M3: 2.0**-3,
    DataType.FP8_E5M2: 2.0**-2,
}
TINIEST = {
    DataType.FLOAT64: 2.0**-1074,
    DataType.FLOAT32: 2.0**-149,
    DataType.FLOAT16: 2.0**-24,
    DataType.BFLOAT16: 2.0**-133,
    DataType.FP8_E4M3: 2.0**-9,
    DataType.FP8_E5M2: 2.0**-16,
}


@pytest.mark.parametrize("dtype", list(DataType), ids=str)
def test_epsilon_and_tiniest_of_every_dtype(dtype: DataType) -> None:
    assert epsilon(dtype) == EPS.get(dtype, 0.0)
    assert tiniest(dtype) == TINIEST.get(dtype, 0.0)


def test_pointwise_node_tolerance() -> None:
    g = sigdnn.Graph("p", io_dtype="float16", compute_dtype="float32")
    y = g.pointwise("exp", g.tensor("x", (3,)), name="e").set_output(True)
    tol = node_tolerance(g, g.nodes[0], y.uid)
    assert tol == Tolerance(2 * 2.0**-24, 2.0**-10 + 4 * 2.0**-23, exact=False, reduction=0.0)


def test_unset_compute_dtype_means_float32_in_the_tolerance() -> None:
    g = sigdnn.Graph("p", io_dtype="bfloat16")
    y = g.pointwise("exp", g.tensor("x", (3,)), name="e")
    assert node_tolerance(g, g.nodes[0], y.uid).rtol == 2.0**-7 + 4 * 2.0**-23


@pytest.mark.parametrize("out", ["int32", "int8", "uint8", "int64", "bool"])
def test_integer_and_bool_outputs_are_exact(out: str) -> None:
    g = sigdnn.Graph("i", io_dtype="int32", compute_dtype="int32")
    a = g.tensor("a", (3,))
    mode = "cmp_gt" if out == "bool" else "add"
    y = g.pointwise(mode, a, a, name="n")
    y.set_data_type(out)
    for tol in (node_tolerance(g, g.nodes[0], y.uid), output_tolerance(g, y.uid)):
        assert tol.exact and (tol.atol, tol.rtol, tol.reduction) == (0.0, 0.0, 0.0)
        assert str(tol) == "exact"
    assert step_tolerance(g, g.nodes, y.uid).exact


def test_integer_compute_with_a_float_output_allows_the_output_rounding_only() -> None:
    g = sigdnn.Graph("i", io_dtype="int32", compute_dtype="int32")
    a = g.tensor("a", (3,))
    y = g.pointwise("mul", a, a, name="n").set_data_type("float32")
    assert node_tolerance(g, g.nodes[0], y.uid) == Tolerance(2 * 2.0**-149, 2.0**-23)


def conv_graph(c: int, k: int, groups: int, kernel: tuple[int, ...]) -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (2, c, *(8,) * len(kernel)))
    w = g.tensor("w", (k, c // groups, *kernel))
    g.conv_fprop(x, w, padding=[1] * len(kernel), name="conv").set_output(True)
    return g


@pytest.mark.parametrize(
    ("c", "k", "groups", "kernel", "terms"),
    [(3, 4, 1, (3, 3), 27), (4, 4, 2, (3, 3), 18), (6, 6, 6, (3,), 3), (5, 2, 1, (2, 3, 2), 60)],
)
def test_conv_reduction_length_is_channels_per_group_times_taps(c, k, groups, kernel, terms) -> None:
    g = conv_graph(c, k, groups, kernel)
    node = g.nodes[0]
    y = node.op.outputs()["y"]
    assert reduction_length(g, node, y) == terms
    tol = node_tolerance(g, node, y)
    assert tol.reduction == pytest.approx(4 * math.sqrt(terms) * 2.0**-23, rel=1e-15)
    assert tol.rtol == 2.0**-23 + 4 * 2.0**-23


def test_a_single_term_is_no_reduction() -> None:
    g = conv_graph(1, 1, 1, (1, 1))  # one channel, one tap: y = w * x
    node = g.nodes[0]
    assert reduction_length(g, node, node.op.outputs()["y"]) == 1
    assert node_tolerance(g, node, node.op.outputs()["y"]).reduction == 0.0
    two = conv_graph(2, 1, 1, (1, 1))
    y2 = two.nodes[0].op.outputs()["y"]
    assert node_tolerance(two, two.nodes[0], y2).reduction == 4 * math.sqrt(2) * 2.0**-23


def test_batched_matmul_reduces_over_k() -> None:
    g = sigdnn.Graph("bmm", io_dtype="float16", compute_dtype="float32")
    c = g.matmul(g.tensor("a", (3, 5, 36)), g.tensor("b", (1, 36, 7)), name="mm").set_output(True)
    node = g.nodes[0]
    assert reduction_length(g, node, c.uid) == 36
    assert node_tolerance(g, node, c.uid) == Tolerance(
        2 * 2.0**-24, 2.0**-10 + 4 * 2.0**-23, reduction=4 * 6 * 2.0**-23
    )


def delta_rule_graph(kind: str, compute: str) -> tuple[sigdnn.Graph, list[int]]:
    """gdn / kda over 300 tokens in 2 sequences, 2 heads, K = 8, V = 4, or their backward: the outputs' uids."""
    g = sigdnn.Graph(kind, io_dtype="bfloat16", compute_dtype=compute)
    q, k, v = g.tensor("q", (300, 2, 8)), g.tensor("k", (300, 2, 8)), g.tensor("v", (300, 2, 4))
    gate = g.tensor("g", (300, 2, 8) if kind.startswith("kda") else (300, 2), dtype="float32")
    ins = (q, k, v, gate, g.tensor("beta", (300, 2)), g.tensor("cu", (3,), dtype="int32"))
    outs = (getattr(g, kind)(*ins, d_o=g.tensor("d_o", (300, 2, 4)), name="n") if kind.endswith("_bwd")
            else getattr(g, kind)(*ins, output_final_state=True, name="n"))  # fmt: skip
    return g, [t.uid for t in outs if t is not None]


@pytest.mark.parametrize("kind", ["gdn", "kda", "gdn_bwd", "kda_bwd"])
@pytest.mark.parametrize(
    ("compute", "summed"),
    [("bfloat16", 2.0**-23), ("float16", 2.0**-23), ("float32", 2.0**-23), ("float64", 2.0**-52)],
)
def test_delta_rules_sum_in_float32_and_round_their_products_operands(kind, compute, summed) -> None:
    """300 terms at float32's epsilon (the compute dtype's where finer) and 4 ulps of the compute dtype: at bf16,
    4 sqrt(300) 2^-23 + 4 2^-7, not 4 sqrt(300) 2^-7 (0.54 of sum|terms|)."""
    g, uids = delta_rule_graph(kind, compute)
    eps = EPS[DataType(compute)]
    for uid in uids:
        assert reduction_length(g, g.nodes[0], uid) == 300
        tol = node_tolerance(g, g.nodes[0], uid)
        out = g.dtype_of(g.tensors[uid])
        assert tol == Tolerance(2 * TINIEST[out], EPS[out] + 4 * eps, reduction=4 * math.sqrt(300) * summed + 4 * eps)


def region_graph() -> sigdnn.Graph:
    """mm (K = 16) -> add bias -> exp, in float32 / float16 compute."""
    g = sigdnn.Graph("region", io_dtype="float32", compute_dtype="float32")
    c = g.matmul(g.tensor("a", (4, 16)), g.tensor("b", (16, 4)), name="mm")
    s = g.pointwise("add", c, g.tensor("bias", (1, 4)), name="bias", compute_dtype="float16")
    g.pointwise("exp", s, name="exp").set_output(True).set_name("y")
    return g


def test_step_tolerance_of_a_region_adds_the_other_nodes_terms() -> None:
    g = region_graph()
    mm, bias, exp = g.nodes
    y = exp.op.outputs()["out_0"]
    e32, e16 = 2.0**-23, 2.0**-10
    assert step_tolerance(g, [exp], y) == node_tolerance(g, exp, y)
    got = step_tolerance(g, [mm, bias, exp], y)
    inner = (e32 + 4 * e32) + (e32 + 4 * e16)
    assert got == Tolerance(2 * 2.0**-149, e32 + 4 * e32, reduction=4 * 4 * e32, inner=inner)
    bias_out = bias.op.outputs()["out_0"]
    assert step_tolerance(g, [mm, bias], bias_out) == Tolerance(
        2 * 2.0**-149, e32 + 4 * e16, reduction=4 * 4 * e32, inner=e32 + 4 * e32
    )


def test_exact_nodes_add_nothing_to_a_region() -> None:
    g = sigdnn.Graph("select", io_dtype="float32", compute_dtype="float32")
    a, b = g.tensor("a", (4,)), g.tensor("b", (4,))
    mask = g.pointwise("cmp_gt", a, b, name="gt").set_data_type("bool")
    y = g.pointwise("binary_select", a, b, mask, name="sel")
    y.set_output(True)
    sel = g.nodes[1]
    assert step_tolerance(g, g.nodes, y.uid) == node_tolerance(g, sel, y.uid)


def test_output_tolerance_formula() -> None:
    g = region_graph()
    e32, e16 = 2.0**-23, 2.0**-10
    y = g.tensor_by_name("y").uid
    rtol = (e32 + 4 * e32) + (e32 + 4 * e16) + (e32 + 4 * e32) + e32
    want = Tolerance(rtol * math.sqrt(16) * 1e-2 + 2 * 2.0**-149, rtol, reduction=4 * 4 * e32)
    got = output_tolerance(g, y)
    assert got.rtol == pytest.approx(want.rtol, rel=1e-15)
    assert got.atol == pytest.approx(want.atol, rel=1e-15)
    assert got.reduction == want.reduction and not got.exact


def test_output_tolerance_skips_exact_nodes_and_uses_the_output_dtype() -> None:
    g = sigdnn.Graph("mixed", io_dtype="float16", compute_dtype="float32")
    a, b = g.tensor("a", (4,)), g.tensor("b", (4,))
    mask = g.pointwise("cmp_gt", a, b, name="gt").set_data_type("bool")
    mask.set_output(True)
    y = g.pointwise("binary_select", a, b, mask, name="sel")
    y.set_output(True)
    e16, e32 = 2.0**-10, 2.0**-23
    rtol = (e16 + 4 * e32) + e16
    got = output_tolerance(g, y.uid)
    assert got == Tolerance(rtol * 1e-2 + 2 * 2.0**-24, rtol, reduction=0.0)
    together = output_tolerances(g, (mask.uid, y.uid))  # one pass over the nodes for every output
    assert together == {mask.uid: Tolerance(0.0, 0.0, exact=True), y.uid: got}


def test_tolerance_text() -> None:
    assert str(Tolerance(0.0, 0.0, exact=True)) == "exact"
    assert str(Tolerance(1e-5, 0.001)) == "atol 1e-05 rtol 0.001"
    assert str(Tolerance(2.5e-7, 1.25e-3, reduction=0.5)) == "atol 2.5e-07 rtol 0.00125 + 0.5*sum|terms|"
    assert str(Tolerance(1e-5, 0.001, inner=0.002)) == "atol 1e-05 rtol 0.001 + inner nodes' error (rtol 0.002)"


def test_an_exact_exit_of_a_region_stays_exact() -> None:
    g = sigdnn.Graph("mask", io_dtype="float32", compute_dtype="float32")
    a = g.tensor("a", (4,))
    mask = g.pointwise("cmp_gt", g.pointwise("exp", a, name="e"), a, name="gt").set_data_type("bool")
    mask.set_output(True)
    tol = step_tolerance(g, g.nodes, mask.uid)
    assert tol.exact and (tol.atol, tol.rtol, tol.reduction) == (0.0, 0.0, 0.0)
