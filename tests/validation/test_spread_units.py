"""accuracy/spread.py on hand-made graphs: each node's outputs move within its own tolerance and reach it,
special values stay, and an output's spread is twice the largest deviation of two such runs."""

from __future__ import annotations

import numpy as np

import sigdnn
from sigdnn.accuracy import spread
from sigdnn.accuracy.tolerances import node_tolerance
from sigdnn.runtime.device import ExecutionContext
from sigdnn.validation.truth import truth_executor


def chain(dtype: str = "float32") -> sigdnn.Graph:
    g = sigdnn.Graph("chain", io_dtype=dtype, compute_dtype="float32")
    x = g.tensor("x", (4, 256))
    g.pointwise("mul", g.pointwise("identity", x, name="copy"), x, name="square").set_output(True).set_name("y")
    return g


def runs(g: sigdnn.Graph, x: np.ndarray) -> tuple[object, dict, dict]:
    reference = truth_executor("cpu")
    plan = reference.prepare(g)
    return plan, {"x": x}, reference.execute(plan, {"x": x})


def test_each_node_moves_within_its_tolerance_and_reaches_it() -> None:
    g = chain()
    copy = g.nodes[0]
    (uid,) = copy.op.outputs().values()
    tolerance = node_tolerance(g, copy, uid)
    edge = tolerance.atol / tolerance.rtol  # where atol and rtol * |v| are alike: a move of up to 2 atol
    x = np.concatenate([np.full(256, edge), np.geomspace(1e-30, 1e30, 768)]).reshape(4, 256).astype(np.float32)
    plan, entries, _ = runs(g, x)
    moved = spread.perturbed_run(g, plan, entries, ExecutionContext(), 0)[uid]
    size = tolerance.atol + tolerance.rtol * np.abs(x.astype(np.float64))
    share = np.abs(moved.astype(np.float64) - x) / size
    assert share.max() <= 1.0 + 2.0**-23 / tolerance.rtol  # within the tolerance, give or take moved's rounding
    assert share.max() > 0.9 and np.count_nonzero(moved[0] != x[0]) > 100


def test_special_values_stay_and_add_no_spread() -> None:
    g = sigdnn.Graph("copy", io_dtype="float16", compute_dtype="float32")
    g.pointwise("identity", g.tensor("x", (4, 256)), name="copy").set_output(True).set_name("y")
    x = np.full((4, 256), 2.0, np.float16)
    x[0, :2] = (np.inf, np.nan)
    x[1] = 65504.0  # the largest float16: a move up past it would overflow, so those stay
    plan, entries, truth = runs(g, x)
    (y,) = g.outputs
    moved = spread.perturbed_run(g, plan, entries, ExecutionContext(), 1)[y.uid]
    assert np.isposinf(moved[0, 0]) and np.isnan(moved[0, 1]) and np.isfinite(moved[1]).all()
    assert (moved[1] < 65504.0).any()  # the moves down happen
    widths = spread.output_spread(g, plan, entries, truth, ExecutionContext())
    assert widths[y.uid][0, 0] == 0 and widths[y.uid][0, 1] == 0  # Inf and NaN outputs: no deviation counted
    assert widths[y.uid][2:].max() > 0


def test_an_outputs_spread_is_twice_the_largest_deviation_of_two_runs() -> None:
    g = chain()
    x = np.random.default_rng(2).standard_normal((4, 256)).astype(np.float32)
    plan, entries, truth = runs(g, x)
    (y,) = g.outputs
    deviations = [
        np.abs(spread.perturbed_run(g, plan, entries, ExecutionContext(), k)[y.uid]
               .astype(np.float64) - truth["y"])
        for k in (0, 1)
    ]  # fmt: skip
    widths = spread.output_spread(g, plan, entries, truth, ExecutionContext())
    np.testing.assert_array_equal(widths[y.uid], 2 * np.maximum(*deviations))
