"""A fused region's inner errors reach its exits at the inner values' own size.

The first GPU campaign failed a correct fused kernel for gelu(x * y) + y:
where the sum cancels, the few float32 ulps the kernel's gelu is allowed are
far larger than the same rtol times the small exit. validate now carries each
inner node's error (atol + rtol * |value|) through the region, moving the
bound through each later node with the reference itself, so these bounds are
pinned here to numbers worked by hand and to a kernel that computes as a GPU
would (float32, a few ulps per node), and a wrong kernel still fails.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
import pytest

import sigdnn
from sigdnn.registry import Dataflow, FusionBuilder, Region, RegionContext, RegionPlan, Registry, make_region
from sigdnn.validation import validate

EPS32 = 2.0**-23
ATOL32 = 2 * 2.0**-149
RTOL32 = EPS32 + 4 * EPS32  # a float32 node computing in float32: one ulp of rounding, four of compute


def _gelu(z: np.ndarray) -> np.ndarray:
    return np.array([0.5 * v * (1 + math.erf(v / math.sqrt(2))) for v in z.ravel().tolist()]).reshape(z.shape)


def _gelu_tanh(z: np.ndarray) -> np.ndarray:
    return 0.5 * z * (1 + np.tanh(math.sqrt(2 / math.pi) * (z + 0.044715 * z**3)))


class Fuse(FusionBuilder):
    """Claims the whole graph as one region and runs ``kernel(buffers by name)`` on it."""

    name: ClassVar[str] = "plugin.fuse"
    engine_id: ClassVar[int] = 31410
    library: ClassVar[str] = "plugin"

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def claim(self, graph: sigdnn.Graph, order: list[int], device: Any) -> list[Region]:
        return [make_region(Dataflow(graph, order), list(order))]

    def build_region(self, region: Region, graph: sigdnn.Graph, context: RegionContext) -> RegionPlan:
        kernel = self.kernel
        uids = {t.name: t.uid for t in graph.tensors.values()}

        class Plan(RegionPlan):
            def execute(self, buffers: Mapping[Any, Any], context: Any = None) -> None:
                kernel({name: buffers[uid] for name, uid in uids.items() if uid in buffers})

        return Plan()


def run(g: sigdnn.Graph, data: dict[str, np.ndarray], kernel: Any) -> sigdnn.validation.ValidationReport:
    registry = Registry(entry_point_group=None)
    registry.register(Fuse(kernel))
    return validate(g, data, executor=sigdnn.Executor(registry=registry))


def gelu_chain() -> sigdnn.Graph:
    """out = gelu(x * y) + y: the campaign's chain, float32 throughout."""
    g = sigdnn.Graph("chain", io_dtype="float32", compute_dtype="float32")
    x, y = g.tensor("x", (64,)), g.tensor("y", (64,))
    g.pointwise("add", g.pointwise("gelu_fwd", g.pointwise("mul", x, y)), y).set_output(True).set_name("out")
    return g


def cancelling() -> dict[str, np.ndarray]:
    """y in [-3, -0.5] and x * y = gelu^-1(-y) to float32: gelu(x * y) + y is a few float32 ulps of |y|."""
    y = -np.linspace(0.5, 3.0, 64)
    z = np.array([_solve_gelu(-v) for v in y])
    return {"x": (z / y).astype(np.float32), "y": y.astype(np.float32)}


def _solve_gelu(target: float) -> float:
    lo, hi = 0.0, 10.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _gelu(np.array([mid]))[0] < target else (lo, mid)
    return lo


def float32_kernel(gelu_ulps: int, gelu: Any = _gelu) -> Any:
    """The chain as a float32 GPU kernel: each node rounded to float32, gelu ``gelu_ulps`` ulps high."""

    def kernel(b: dict[str, np.ndarray]) -> None:
        m = b["x"] * b["y"]  # float32 product
        g = gelu(m.astype(np.float64)).astype(np.float32)
        g = g + gelu_ulps * np.spacing(np.abs(g))
        b["out"][...] = g + b["y"]

    return kernel


def test_a_correct_kernel_passes_where_the_exit_cancels() -> None:
    data = cancelling()
    report = run(gelu_chain(), data, float32_kernel(gelu_ulps=3))
    (check,) = report.nodes
    assert check.comparison.max_ulp_error > 100  # the exit really cancels: 3 ulps of gelu are many of the sum
    assert check.comparison.passed, report.table()
    assert report.passed, report.table()  # end to end too: the errors are carried from the inputs on


def test_a_wrong_gelu_fails_though_the_exit_cancels() -> None:
    """The tanh approximation inside the region (off by up to 2e-4 of gelu) is no few-ulp error."""
    report = run(gelu_chain(), cancelling(), float32_kernel(gelu_ulps=0, gelu=_gelu_tanh))
    assert not report.nodes[0].comparison.passed, report.table()


def test_too_many_ulps_in_the_gelu_fail() -> None:
    """Gelu's bound is its rtol (5 float32 ulps) times |gelu| moved to the exit: 12 ulps are over it."""
    report = run(gelu_chain(), cancelling(), float32_kernel(gelu_ulps=12))
    assert not report.nodes[0].comparison.passed, report.table()


def linear_chain() -> sigdnn.Graph:
    """out = a * b + c."""
    g = sigdnn.Graph("linear", io_dtype="float32", compute_dtype="float32")
    a, b, c = g.tensor("a", (1,)), g.tensor("b", (1,)), g.tensor("c", (1,))
    g.pointwise("add", g.pointwise("mul", a, b, name="mul"), c, name="add").set_output(True).set_name("out")
    return g


@pytest.mark.parametrize(("share", "passes"), [(0.999, True), (1.001, False)])
def test_the_carried_bound_worked_by_hand(share: float, passes: bool) -> None:
    """3 * 5 - 15 = 0: the add's own bound is its atol; the mul's error, atol + rtol * 15, arrives unchanged
    (d out / d product = 1). A device off by just under their sum passes; just over fails. (Without the carried
    error the bound would be the add's atol plus rtol * |0|: both would fail.)"""
    bound = ATOL32 + (ATOL32 + RTOL32 * 15.0)
    off = np.float32(share * bound)

    def kernel(b: dict[str, np.ndarray]) -> None:
        b["out"][...] = off

    data = {"a": np.float32([3.0]), "b": np.float32([5.0]), "c": np.float32([-15.0])}
    report = run(linear_chain(), data, kernel)
    assert report.nodes[0].comparison.passed == passes, report.table()


def test_a_node_off_the_exits_path_brings_it_no_error() -> None:
    """Two exits of one region, q = a * 2 and p = exp(q / 8): q is judged by its own rtol alone (the exp after
    it cannot reach it), so 7.5 ulps on q fail though its own rtol plus exp's (10 ulps) would let them through."""
    g = sigdnn.Graph("apart", io_dtype="float32", compute_dtype="float32")
    q = g.pointwise("mul", g.tensor("a", (1,)), g.scalar("two", 2.0), name="double").set_output(True).set_name("q")
    g.pointwise("exp", g.pointwise("mul", q, g.scalar("eighth", 0.125)), name="exp").set_output(True).set_name("p")

    def kernel(b: dict[str, np.ndarray]) -> None:
        b["p"][...] = np.exp(10.0 / 8)
        b["q"][...] = 10.0 + 7.5 * EPS32 * 10.0

    report = run(g, {"a": np.float32([5.0])}, kernel)
    verdicts = {c.comparison.name: c.comparison.passed for c in report.nodes}
    assert verdicts == {"p": True, "q": False}, report.table()


def test_a_flat_stretch_carries_almost_nothing() -> None:
    """tanh(a * b) at a * b = 12 (1 to float32): tanh is flat there (slope 2e-10), so the product's error does not
    reach the exit and tanh's own 5 ulps of 1 are all a device may be off: 7 fail (the summed rtols would pass
    them)."""
    g = sigdnn.Graph("flat", io_dtype="float32", compute_dtype="float32")
    g.pointwise("tanh_fwd", g.pointwise("mul", g.tensor("a", (1,)), g.tensor("b", (1,)))).set_output(True)
    want = np.float32(math.tanh(12.0))

    def kernel(b: dict[str, np.ndarray]) -> None:
        b[g.outputs[0].name][...] = want - np.float32(7 * EPS32)

    report = run(g, {"a": np.float32([3.0]), "b": np.float32([4.0])}, kernel)
    assert not report.nodes[0].comparison.passed, report.table()


EPS16 = 2.0**-10
ATOL16 = 2 * 2.0**-24
RTOL16 = EPS16 + 4 * EPS32


def off_by(g: sigdnn.Graph, data: dict[str, np.ndarray], exit_value: float, off: float) -> bool:
    """Does a device whose one-element exit is ``exit_value + off`` (all else exact) pass?"""
    (out,) = g.outputs

    def kernel(b: dict[str, np.ndarray]) -> None:
        b[out.name][...] = exit_value + off

    return run(g, data, kernel).nodes[0].comparison.passed


def near_zero(tail: str) -> tuple[sigdnn.Graph, dict[str, np.ndarray], float]:
    """m = a * b + c = 15 + c, just off zero; the exit is ``tail``(m): its bound is the error m carries, E."""
    g = sigdnn.Graph("kink", io_dtype="float32", compute_dtype="float32")
    m = g.pointwise("add", g.pointwise("mul", g.tensor("a", (1,)), g.tensor("b", (1,))), g.tensor("c", (1,)))
    if tail == "min":
        g.pointwise("min", m, g.scalar("zero", 0.0)).set_output(True)
    else:
        g.pointwise(tail, m).set_output(True)
    step = 2.0**-20  # float32's spacing at 15
    c = -15.0 - step if tail == "relu_fwd" else -15.0 + step
    error = (ATOL32 + RTOL32 * 15.0) + ATOL32 + RTOL32 * step  # the product's bound, then the add's own
    data = {"a": np.float32([3.0]), "b": np.float32([5.0]), "c": np.float32([c])}
    return g, data, error


@pytest.mark.parametrize(("share", "passes"), [(0.99, True), (1.01, False)])
def test_relu_across_its_kink_carries_the_side_that_moves(share: float, passes: bool) -> None:
    """m = -2**-20 < 0 < m + E: relu(m + E) - relu(m) = E + m is the carried error; relu(m - E) moves nothing."""
    g, data, error = near_zero("relu_fwd")
    bound = ATOL32 + (error - 2.0**-20)
    assert off_by(g, data, 0.0, share * bound) == passes


@pytest.mark.parametrize(("share", "passes"), [(0.99, True), (1.01, False)])
def test_min_across_zero_carries_the_lower_side(share: float, passes: bool) -> None:
    """m = 2**-20 > 0 > m - E: min(m - E, 0) - min(m, 0) = m - E; min(m + E, 0) moves nothing."""
    g, data, error = near_zero("min")
    bound = ATOL32 + (error - 2.0**-20)
    assert off_by(g, data, 0.0, -share * bound) == passes


@pytest.mark.parametrize(("share", "passes"), [(0.99, True), (1.01, False)])
def test_a_side_that_leaves_the_domain_is_dropped(share: float, passes: bool) -> None:
    """sqrt(m - E) is NaN (m - E < 0): only sqrt(m + E) - sqrt(m) is carried, on top of sqrt's own bound."""
    g, data, error = near_zero("sqrt")
    m = 2.0**-20
    want = float(np.float32(math.sqrt(m)))
    bound = ATOL32 + RTOL32 * want + (math.sqrt(m + error) - math.sqrt(m))
    assert off_by(g, data, want, share * bound) == passes


@pytest.mark.parametrize(("share", "passes"), [(0.99, True), (1.01, False)])
def test_bounds_are_moved_in_float64_not_in_the_inner_dtype(share: float, passes: bool) -> None:
    """float16 throughout: t = 3 * 5, u = 2 t, exit u - 30 = 0. u's moved values (30 +- 2 E_t) are taken in
    float64: float16 (spacing 2**-6 at 30) would round 2 E_t = 0.0293 to 0.03125, 7% over the bound."""
    g = sigdnn.Graph("f16", io_dtype="float16", compute_dtype="float32", intermediate_dtype="float16")
    t = g.pointwise("mul", g.tensor("a", (1,)), g.tensor("b", (1,)))
    u = g.pointwise("mul", t, g.scalar("two", 2.0))
    g.pointwise("add", u, g.tensor("c", (1,))).set_output(True)
    bound = ATOL16 + 2 * (ATOL16 + RTOL16 * 15) + ATOL16 + RTOL16 * 30
    data = {"a": np.float16([3.0]), "b": np.float16([5.0]), "c": np.float16([-30.0])}
    assert off_by(g, data, 0.0, share * bound) == passes


@pytest.mark.parametrize(("share", "passes"), [(0.99, True), (1.01, False)])
def test_a_matmul_in_a_region_takes_the_bounds_through_its_terms(share: float, passes: bool) -> None:
    """t = 2 a = [2, 4] (inner), c = t @ [3, -4] = -10 (exit): t's bound moves as E_t @ |b| = 3 E_t0 + 4 E_t1,
    beside the matmul's own rtol * |c| and its accumulation bound 4 sqrt(2) eps * (|t| @ |b|)."""
    g = sigdnn.Graph("scaled_mm", io_dtype="float32", compute_dtype="float32")
    t = g.pointwise("mul", g.tensor("a", (1, 2)), g.scalar("two", 2.0))
    g.matmul(t, g.tensor("b", (2, 1))).set_output(True)
    inner = 3 * (ATOL32 + RTOL32 * 2) + 4 * (ATOL32 + RTOL32 * 4)
    bound = ATOL32 + RTOL32 * 10 + 4 * math.sqrt(2) * EPS32 * 22 + inner
    data = {"a": np.float32([[1.0, 2.0]]), "b": np.float32([[3.0], [-4.0]])}
    assert off_by(g, data, -10.0, share * bound) == passes


@pytest.mark.parametrize(("subnormals", "passes"), [(15, True), (17, False)])
def test_zero_inner_values_still_carry_their_atol(subnormals: int, passes: bool) -> None:
    """t = 2 a = [0, 0]: t carries only its atol (2**-148 each, a GPU flushing subnormals is that far off),
    which reaches c = t @ [3, -4] = 0 as 7 atol; with c's own atol the bound is 16 float32 subnormals."""
    g = sigdnn.Graph("zero_mm", io_dtype="float32", compute_dtype="float32")
    t = g.pointwise("mul", g.tensor("a", (1, 2)), g.scalar("two", 2.0))
    g.matmul(t, g.tensor("b", (2, 1))).set_output(True)
    data = {"a": np.float32([[0.0, 0.0]]), "b": np.float32([[3.0], [-4.0]])}
    assert off_by(g, data, 0.0, subnormals * 2.0**-149) == passes


def test_data_movement_moves_each_inputs_bound_and_adds_none_for_an_input_without_one() -> None:
    """A concatenate of a computed tensor (its carried error given) and a graph input (none): the output's carried
    error is the computed half's bound moved into place, plus the concatenate's own allowance, and only that
    allowance over the input's half (an input without a bound brings nothing)."""
    from sigdnn.accuracy.step_reference import run_reference
    from sigdnn.accuracy.tolerances import node_tolerance
    from sigdnn.registry.registry import REFERENCE_ONLY
    from sigdnn.runtime.device import ExecutionContext

    g = sigdnn.Graph("cat", io_dtype="float32", compute_dtype="float32")
    a, b = g.tensor("a", (4, 8)), g.tensor("b", (4, 8))
    t = g.pointwise("relu_fwd", a, name="relu")
    y = g.concatenate([t, b], 1, name="cat")
    y.set_output(True).set_name("y")
    reference = sigdnn.Executor("reference", fusion=False, registry=REFERENCE_ONLY)
    plan = reference.prepare(g)
    plans = {s.node.name: s for s in plan.steps}
    rng = np.random.default_rng(3)
    seen = {"a": rng.uniform(-1, 1, (4, 8)).astype(np.float32), "b": rng.uniform(-1, 1, (4, 8)).astype(np.float32)}
    seen[t.name] = np.maximum(seen["a"], 0)
    carried_t, terms_t = np.full((4, 8), 1e-3), np.full((4, 8), 5.0)
    truth = run_reference(g, plan.steps[1], plans, seen, {t.uid: terms_t}, {t.uid: carried_t}, ExecutionContext())
    np.testing.assert_array_equal(truth.through[y.uid], np.concatenate([terms_t, 0 * terms_t], 1))  # |terms| too
    own = node_tolerance(g, g.nodes[1], y.uid)
    values = np.concatenate([seen[t.name], seen["b"]], 1).astype(np.float64)
    allowance = own.atol + own.rtol * np.abs(values)
    np.testing.assert_allclose(truth.errors_through[y.uid], allowance + np.concatenate([carried_t, 0 * carried_t], 1))
