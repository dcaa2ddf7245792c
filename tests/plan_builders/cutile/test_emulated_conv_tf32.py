"""cuTile implicit-GEMM convs (fprop, dgrad, wgrad) as TF32: float32 operands of a node whose compute dtype is 16-bit.

TF32 keeps 10 of float32's 23 mantissa bits; the tensor cores round each
operand to nearest, ties away from zero. The oracle is torch's float64 conv
(or gradient) of the operands rounded so, written here and not read from the
emulator: the result must lie within float32 summation's bound of it, and
outside that bound of the exact operands' conv (the rounding did happen).
Validation passes at the node's compute dtype's tolerance; with float32
compute the same graphs stay exact (tests/plan_builders/cutile/
test_emulated_conv_gemm.py and test_emulated_conv_backward_gemm.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from conv_backward_cases import CASES, dgrad_graph, dy_dims, torch_dgrad, torch_wgrad, wgrad_graph, within_float32_bound
from conv_grouped_cases import Case, graph, torch_conv
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.dtypes import DataType
from sigdnn.plan_builders.cutile import conv_gemm

# kind -> (graph of a case, output, operands, float64 oracle of (case, a, b), products summed per element)
KINDS: dict[str, tuple[Callable, str, tuple[str, str], Callable, Callable]] = {
    "fprop": (graph, "conv::y", ("x", "w"), torch_conv, lambda c: math.prod(c.w_dims[1:])),
    "dgrad": (dgrad_graph, "dx", ("dy", "w"), torch_dgrad, lambda c: c.w_dims[0] // c.groups * math.prod(c.w_dims[2:])),
    "wgrad": (wgrad_graph, "dw", ("x", "dy"), torch_wgrad, lambda c: c.dims[0] * math.prod(dy_dims(c)[2:])),
}  # fmt: skip
FLOAT32 = [c for c in CASES if c.dtype == "float32" and c.w_dtype is None]
PAIRS = [(k, c) for k in KINDS for c in FLOAT32]
IDS = [f"{k}-{c.name}" for k, c in PAIRS]


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)


def tf32(a: np.ndarray) -> np.ndarray:
    """float32 values rounded to 10 mantissa bits, to nearest with ties away from zero (the sign bit apart)."""
    bits = a.astype(np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def tf32_graph(kind: str, case: Case, compute: str = "float16") -> sigdnn.Graph:
    g = KINDS[kind][0](case)
    g.nodes[-1].compute_dtype = DataType(compute)
    return g


def test_the_rounding_written_here_is_tf32s() -> None:
    """1 + 2^-11 ties away to 1 + 2^-10; just below it rounds down; 10 mantissa bits pass unchanged."""
    values = np.array([1 + 2**-11, 1 + 2**-11 - 2**-23, 1 + 2**-10 + 2**-11, -(1 + 2**-11), 1 + 1023 * 2**-10])
    want = np.array([1 + 2**-10, 1.0, 1 + 2**-9, -(1 + 2**-10), 1 + 1023 * 2**-10])
    np.testing.assert_array_equal(tf32(values.astype(np.float32)), want.astype(np.float32))


@pytest.mark.parametrize(("kind", "case"), PAIRS, ids=IDS)
def test_float32_operands_with_16_bit_compute_multiply_as_tf32(kind: str, case: Case) -> None:
    _, output, operands, oracle, terms = KINDS[kind]
    g = tf32_graph(kind, case)
    inputs = random_inputs(g, seed=7 + len(case.name))
    executor = emulated_executor(engine=f"cutile.conv_{kind}_gemm")  # grouped fprop would go to the direct conv
    assert [s.builder.name for s in executor.prepare(g).steps] == [f"cutile.conv_{kind}_gemm"]
    got = executor.run(g, inputs)[output]
    a, b = (inputs[p] for p in operands)
    count = terms(case)
    assert within_float32_bound(lambda u, v: oracle(case, u, v), tf32(a), tf32(b), got, count, "float32").all()
    assert not within_float32_bound(lambda u, v: oracle(case, u, v), a, b, got, count, "float32").all()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("compute", ["float16", "bfloat16"])
def test_tf32_convs_pass_validation_at_their_compute_dtype(kind: str, compute: str) -> None:
    g = tf32_graph(kind, FLOAT32[0], compute)
    executor = emulated_executor(engine=f"cutile.conv_{kind}_gemm")  # fprop: im2col + GEMM would take it unpinned
    report = sigdnn.validate(g, random_inputs(g, seed=11), executor=executor)
    assert set(report.builders.values()) == {f"cutile.conv_{kind}_gemm"}, report.builders
    assert report.passed, report.table()


def test_only_widened_operands_of_a_16_bit_compute_node_go_as_tf32() -> None:
    """x and w of one 16-bit dtype multiply as they are, whatever the compute dtype; float32 compute is exact."""
    rows = {  # (x, w, compute): TF32
        ("float32", "float32", "float16"): True,
        ("float32", "float32", "bfloat16"): True,
        ("bfloat16", "float32", "bfloat16"): True,
        ("float32", "float32", "float32"): False,
        ("bfloat16", "float32", "float32"): False,
        ("bfloat16", "bfloat16", "float16"): False,
        ("float16", "float16", "float16"): False,
    }
    for (dx, dw, compute), want in rows.items():
        g = sigdnn.Graph("tf32", io_dtype="float32")
        x = g.tensor("x", (1, 2, 3, 3)).set_data_type(dx)
        w = g.tensor("w", (2, 2, 1, 1)).set_data_type(dw)
        g.conv_fprop(x, w, padding=(0, 0), name="conv", compute_dtype=compute)
        assert conv_gemm.as_tf32(g, g.nodes[-1], x, w) is want, (dx, dw, compute)
