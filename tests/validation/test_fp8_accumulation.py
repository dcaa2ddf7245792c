"""validate's fp8 rule: a dot product over fp8 operands may be off by 2 * 2**-13 * sum|a b|, Hopper's fp8
accumulator, besides the float32 bound; checked with a NumPy model of that accumulator standing in for the
tensor cores (each 32-deep instruction adds its products to the running partial sum keeping 14 significant
bits, truncated; every 4 instructions the partial sum is promoted into a float32 total, as cuBLAS does).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy import tolerances
from sigdnn.accuracy.tolerances import Tolerance, node_tolerance
from sigdnn.dtypes import round_to
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.validation import validate

EPS32 = 2.0**-23
SLICE = 32  # products one fp8 wgmma instruction sums
PROMOTE_EVERY = 4  # instructions between promotions into float32 (a 128-deep K tile)


def truncated(x: np.ndarray, bits: int = 14) -> np.ndarray:
    """x toward zero to ``bits`` significant bits."""
    mantissa, exponent = np.frexp(x)
    return np.ldexp(np.trunc(mantissa * 2.0**bits) / 2.0**bits, exponent)


def hopper_fp8_matmul(a: np.ndarray, b: np.ndarray, skip_slice: int | None = None) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    total = np.zeros((a.shape[0], b.shape[1]), np.float32)
    partial = np.zeros(total.shape)
    for i, k0 in enumerate(range(0, a.shape[1], SLICE)):
        if i != skip_slice:
            partial = truncated(partial + a[:, k0 : k0 + SLICE] @ b[k0 : k0 + SLICE])
        if (i + 1) % PROMOTE_EVERY == 0 or k0 + SLICE >= a.shape[1]:
            total = (total + partial.astype(np.float32)).astype(np.float32)
            partial = np.zeros(total.shape)
    return total


class HopperFp8Matmul(PlanBuilder):
    name, engine_id, library, ops, priority = "plugin.hopper_fp8", 31420, "plugin", ("matmul",), 10

    def __init__(self, skip_slice: int | None = None) -> None:
        self.skip_slice = skip_slice

    def build(self, node: Any, graph: Any, context: Any) -> NodePlan:
        skip = self.skip_slice

        class Plan(NodePlan):
            def execute(self, buffers: Any, context: Any = None) -> None:
                buffers["c"][...] = hopper_fp8_matmul(buffers["a"], buffers["b"], skip)

        return Plan()


def graph(k: int, b_dtype: str = "fp8_e4m3") -> sigdnn.Graph:
    g = sigdnn.Graph("fp8", io_dtype="float32", compute_dtype="float32")
    a, b = g.tensor("a", (48, k), dtype="fp8_e4m3"), g.tensor("b", (k, 40), dtype=b_dtype)
    g.matmul(a, b, name="mm").set_output(True).set_name("c")
    return g


def check(k: int, seed: int, skip_slice: int | None = None, b_dtype: str = "fp8_e4m3") -> bool:
    g = graph(k, b_dtype)
    rng = np.random.default_rng(seed)
    data = {
        "a": round_to(rng.uniform(-2, 2, (48, k)), sigdnn.DataType.FP8_E4M3),
        "b": round_to(rng.uniform(-2, 2, (k, 40)), sigdnn.DataType(b_dtype)),
    }
    registry = Registry(entry_point_group=None)
    registry.register(HopperFp8Matmul(skip_slice))
    report = validate(g, data, executor=sigdnn.Executor(registry=registry))
    return report.nodes[0].comparison.passed


def test_the_rule_by_hand() -> None:
    g = graph(64)
    (mm,) = g.nodes
    c = mm.op.outputs()["c"]
    want = Tolerance(2 * 2.0**-149, EPS32 + 4 * EPS32, reduction=4 * math.sqrt(64) * EPS32 + 2 * 2.0**-13)
    assert node_tolerance(g, mm, c) == want


@pytest.mark.parametrize("dtypes", [("bfloat16", "bfloat16"), ("float32", "float32")])
def test_no_fp8_no_rule(dtypes: tuple[str, str]) -> None:
    g = sigdnn.Graph("mm", io_dtype="float32", compute_dtype="float32")
    a, b = g.tensor("a", (4, 64), dtype=dtypes[0]), g.tensor("b", (64, 4), dtype=dtypes[1])
    g.matmul(a, b, name="mm").set_output(True)
    assert node_tolerance(g, g.nodes[0], g.outputs[0].uid).reduction == 4 * 8 * EPS32


def test_a_sum_of_fp8_values_is_no_dot_product() -> None:
    """A reduction over fp8 values runs on CUDA cores in float32: the fp8 accumulator share is not its."""
    g = sigdnn.Graph("sum", io_dtype="float32", compute_dtype="float32")
    g.reduction(g.tensor("x", (4, 64), dtype="fp8_e4m3"), "add", (4, 1), name="sum").set_output(True)
    assert node_tolerance(g, g.nodes[0], g.outputs[0].uid).reduction == 4 * 8 * EPS32


def test_a_one_term_product_has_no_accumulation() -> None:
    g = graph(1)
    assert node_tolerance(g, g.nodes[0], g.outputs[0].uid).reduction == 0.0


@pytest.mark.parametrize(("k", "b_dtype"), [(64, "fp8_e4m3"), (272, "fp8_e5m2"), (4096, "fp8_e4m3")])
def test_the_fp8_accumulator_passes(k: int, b_dtype: str) -> None:
    assert check(k, seed=k, b_dtype=b_dtype)


def test_without_the_rule_the_fp8_accumulator_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """As it did on the H200 for cuBLAS and CuTe alike: at K = 64 the float32 bound alone is 27x too tight."""
    monkeypatch.setattr(tolerances, "FP8_ACCUMULATOR_ULPS", 0)
    assert not check(64, seed=64)


@pytest.mark.parametrize(("k", "slice_"), [(64, 1), (4096, 77)])
def test_a_dropped_instruction_fails(k: int, slice_: int) -> None:
    assert not check(k, seed=k, skip_slice=slice_)


def test_two_terms_are_an_accumulation() -> None:
    g = graph(2)
    assert node_tolerance(g, g.nodes[0], g.outputs[0].uid).reduction == 4 * math.sqrt(2) * EPS32 + 2 * 2.0**-13


def test_one_fp8_operand_is_enough() -> None:
    """An fp8 A times a bfloat16 B still runs on the fp8 path's accumulator."""
    g = sigdnn.Graph("mixed", io_dtype="float32", compute_dtype="float32")
    a, b = g.tensor("a", (4, 64), dtype="fp8_e4m3"), g.tensor("b", (64, 4), dtype="bfloat16")
    g.matmul(a, b, name="mm").set_output(True)
    assert node_tolerance(g, g.nodes[0], g.outputs[0].uid).reduction == 4 * 8 * EPS32 + 2 * 2.0**-13
