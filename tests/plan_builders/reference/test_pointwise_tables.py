"""Unary pointwise ops on float16 / bfloat16 / fp8 inputs run through a table of every input pattern.

The table is only a memo of the float64 path (widen, evaluate, round once):
each test runs every input pattern, shuffled and repeated so the output is
large enough for the table, and checks every output bit against that path
taken directly here, signed zeros and NaN payloads included.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sigdnn
from sigdnn.dtypes import DataType, round_to
from sigdnn.plan_builders.reference.pointwise import FLOAT_MODES, tabulated_input

UNARY = sorted(
    mode for mode, fn in FLOAT_MODES.items() if fn.__code__.co_argcount == 2 and not mode.startswith("logical")
)
INDEX = {"float16": np.uint16, "bfloat16": np.uint16, "fp8_e4m3": np.uint8, "fp8_e5m2": np.uint8}


def every_pattern(dtype: str, copies: int) -> np.ndarray:
    index = INDEX[dtype]
    patterns = np.arange(np.iinfo(index).max + 1, dtype=index)
    shuffled = np.random.default_rng(3).permutation(np.tile(patterns, copies))
    return shuffled.view(DataType(dtype).numpy)


def run_unary(mode: str, x: np.ndarray, io_dtype: str, **params: float) -> tuple[np.ndarray, sigdnn.Graph]:
    g = sigdnn.Graph("u", io_dtype=io_dtype, compute_dtype="float32")
    g.pointwise(mode, g.tensor("x", x.shape), name="op", **params).set_output(True).set_name("y")
    return sigdnn.Executor().run(g, {"x": x})["y"], g


def float64_path(mode: str, x: np.ndarray, dtype: str, op: object) -> np.ndarray:
    with np.errstate(all="ignore"):
        return round_to(FLOAT_MODES[mode](x.astype(np.float64), op), DataType(dtype))


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and np.array_equal(a.view(f"u{a.itemsize}"), b.view(f"u{b.itemsize}"))


@pytest.mark.parametrize("mode", UNARY)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_a_tabulated_unary_op_has_the_bits_of_the_float64_path(mode: str, dtype: str) -> None:
    x = every_pattern(dtype, 2)
    got, g = run_unary(mode, x, dtype)
    node = g.node_by_name("op")
    assert tabulated_input(node, g) is DataType(dtype)
    assert same_bits(got, float64_path(mode, x, dtype, node.op))


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("mode", ["gelu_fwd", "exp", "rsqrt"])
def test_fp8_inputs_are_tabulated_too(dtype: str, mode: str) -> None:
    x = every_pattern(dtype, 300)  # 76,800 elements: past the 256-entry table's size
    got, g = run_unary(mode, x, dtype)
    assert same_bits(got, float64_path(mode, x, dtype, g.node_by_name("op").op))


@pytest.mark.parametrize("lo", [0.0, -0.0, 0.5, -1.0, -math.inf, math.nan, 1e-30])
@pytest.mark.parametrize("slope", [0.0, 0.25])
def test_relu_with_its_parameters_through_the_table_is_the_definition(lo: float, slope: float) -> None:
    """relu_fwd's parameters reach the tabulated evaluation: every float16 against docs/ops.md's definition
    (x <= lo -> lo + slope (x - lo); else x), rounded once."""
    x = every_pattern("float16", 2)
    got, _ = run_unary("relu_fwd", x, "float16", relu_lower_clip=lo, relu_lower_clip_slope=slope)
    wide = x.astype(np.float64)
    with np.errstate(all="ignore"):
        want = np.where(wide <= lo, lo + slope * (wide - lo) if slope else lo, wide).astype(np.float16)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    assert same_bits(got[~nan], want[~nan])  # signed zeros included


def test_small_outputs_skip_the_table_and_binary_ops_are_not_tabulated() -> None:
    x = np.array([-2.0, -0.0, 0.5, 3.0], np.float16)
    got, g = run_unary("gelu_fwd", x, "float16")
    assert same_bits(got, float64_path("gelu_fwd", x, "float16", g.node_by_name("op").op))
    g2 = sigdnn.Graph("b", io_dtype="float16")
    g2.pointwise("add", g2.tensor("a", (4,)), g2.tensor("b", (4,)), name="add").set_output(True)
    assert tabulated_input(g2.node_by_name("add"), g2) is None
