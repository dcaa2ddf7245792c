"""validate(): node-by-node verdicts catch one wrong kernel that end-to-end tolerances would hide."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.tolerances import Tolerance
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.validation import compare, node_tolerance, validate


class SkewedTanh(NodePlan):
    """tanh in float32, then nudged by ``ulps`` float32 ulps: a subtly wrong kernel."""

    def __init__(self, ulps: int) -> None:
        self.ulps = ulps

    def execute(self, buffers: Any, context: Any = None) -> None:
        y = np.tanh(buffers["in_0"].astype(np.float32))
        for _ in range(self.ulps):
            y = np.nextafter(y, np.float32(np.inf))
        buffers["out_0"][...] = y


class SkewedTanhBuilder(PlanBuilder):
    name: ClassVar[str] = "plugin.skewed_tanh"
    engine_id: ClassVar[int] = 30500
    library: ClassVar[str] = "plugin"
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)
    priority: ClassVar[int] = 10

    def __init__(self, ulps: int) -> None:
        self.ulps = ulps

    def serves(self, key: Any) -> bool:
        return key.op == "pointwise" and key.trait("mode") == "tanh_fwd"

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        return SkewedTanh(self.ulps)


class Float32Matmul(NodePlan):
    def execute(self, buffers: Any, context: Any = None) -> None:
        buffers["c"][...] = np.matmul(buffers["a"].astype(np.float32), buffers["b"].astype(np.float32))


class Float32MatmulBuilder(PlanBuilder):
    name, engine_id, library, ops, priority = "plugin.f32_matmul", 30501, "plugin", ("matmul",), 10

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        return Float32Matmul()


def chain() -> sigdnn.Graph:
    g = sigdnn.Graph("chain", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(64, 257))
    t = g.pointwise("mul", x, x, name="square")
    t = g.pointwise("tanh_fwd", t, name="tanh")
    t = g.pointwise("add", t, x, name="skip")
    g.pointwise("sigmoid_fwd", t, name="sigmoid").set_output(True).set_name("y")
    return g


def device(*builders: PlanBuilder) -> sigdnn.Executor:
    """A CPU 'device' whose builders outrank the reference's: stands in for a GPU backend."""
    reg = Registry()
    for b in builders:
        reg.register(b)
    return sigdnn.Executor("reference", registry=reg)


def test_reference_against_itself_is_exact_at_every_node() -> None:
    report = validate(chain(), seed=1, executor=sigdnn.Executor())
    assert report.passed
    assert [c.node for c in report.nodes] == ["square", "tanh", "skip", "sigmoid"]
    assert all(c.comparison.max_abs_error == 0 for c in report.nodes)
    assert "validation of 'chain' against the CPU reference: PASS" in report.table()


def test_a_float32_kernel_within_its_ulps_passes() -> None:
    report = validate(chain(), seed=2, executor=device(SkewedTanhBuilder(ulps=0)))
    assert report.builders["tanh"] == "plugin.skewed_tanh"
    assert report.passed, report.table()


def test_one_wrong_node_is_caught_at_that_node() -> None:
    """8 float32 ulps off: the tanh node fails; the end-to-end output stays within its loose bound."""
    report = validate(chain(), seed=3, executor=device(SkewedTanhBuilder(ulps=8)))
    verdicts = {c.node: c.comparison.passed for c in report.nodes}
    assert verdicts == {"square": True, "tanh": False, "skip": True, "sigmoid": True}
    assert all(c.passed for c in report.outputs)
    assert not report.passed
    table = report.table()
    assert "FAIL" in table and "worst at" in table


def test_float32_accumulation_passes_the_reduction_bound() -> None:
    g = sigdnn.Graph("mm", io_dtype="float32", compute_dtype="float32")
    g.matmul(g.tensor("a", dims=(16, 4096)), g.tensor("b", dims=(4096, 16)), name="mm").set_output(True)
    report = validate(g, seed=4, executor=device(Float32MatmulBuilder()))
    comparison = report.nodes[0].comparison
    assert comparison.max_abs_error > 0  # float32 accumulation really differs from float64
    assert report.passed, report.table()
    tol = node_tolerance(g, g.nodes[0], g.nodes[0].op.c)
    assert tol.reduction == pytest.approx(4 * 64 * np.finfo(np.float32).eps)


def test_nan_and_inf_must_match_position_for_position() -> None:
    want = np.array([1.0, np.nan, np.inf, -np.inf])
    ok = compare("t", want.copy(), want, Tolerance(0, 1e-3))
    assert ok.passed
    bad = compare("t", np.array([1.0, 0.0, np.inf, np.inf]), want, Tolerance(0, 1e-3))
    assert bad.nan_inf_mismatches == 2 and not bad.passed


def test_integer_outputs_must_match_exactly() -> None:
    got = compare("i", np.array([1, 2, 3]), np.array([1, 2, 4]), Tolerance(0, 0, exact=True))
    assert got.mismatches == 1 and got.worst_index == (2,)


class Float32Layernorm(NodePlan):
    """layernorm in float32, as a GPU kernel would; ``epsilon`` wrong on purpose when asked."""

    def __init__(self, epsilon: float) -> None:
        self.epsilon = epsilon

    def execute(self, buffers: Any, context: Any = None) -> None:
        x = buffers["x"].astype(np.float32)
        mean = x.mean(axis=-1, keepdims=True)
        inv = 1 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + np.float32(self.epsilon))
        buffers["y"][...] = (x - mean) * inv * buffers["scale"] + buffers["bias"]


class Float32LayernormBuilder(PlanBuilder):
    name, engine_id, library, ops, priority = "plugin.f32_layernorm", 30502, "plugin", ("layernorm",), 10

    def __init__(self, epsilon: float) -> None:
        self.epsilon = epsilon

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        return Float32Layernorm(self.epsilon)


def layernorm_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("ln", io_dtype="float32", compute_dtype="float32")
    x, scale, bias = g.tensor("x", (64, 4096)), g.tensor("scale", (1, 4096)), g.tensor("bias", (1, 4096))
    y, _, _ = g.layernorm("inference", x, scale, bias, epsilon=1e-5, name="ln")
    y.set_output(True).set_name("y")
    return g


def test_a_nonlinear_reduction_is_judged_with_a_normwise_accumulation_bound() -> None:
    """float32 accumulation over 4096 terms passes; an epsilon off by 100x fails, at that node."""
    good = validate(layernorm_graph(), seed=5, executor=device(Float32LayernormBuilder(1e-5)))
    assert good.passed, good.table()
    bad = validate(layernorm_graph(), seed=5, executor=device(Float32LayernormBuilder(1e-3)))
    assert not bad.passed
    assert [c.node for c in bad.nodes if not c.comparison.passed] == ["ln"]


def test_sigdnn_validate_is_the_function_after_its_module_is_imported() -> None:
    """Importing ``sigdnn.validation.checks`` (the module) binds the package's attribute of that name to it; the
    top-level ``sigdnn.validate`` must still be the function (a fresh interpreter: import order matters)."""
    import subprocess
    import sys

    code = "import sigdnn.validation.checks, sigdnn; assert callable(sigdnn.validate), sigdnn.validate"
    subprocess.run([sys.executable, "-c", code], check=True)
