"""GPU reference pointwise modes (gpu_reference/pointwise.py) at their edges, on the emulator: parameters set
(relu's clips and slope, elu's alpha, softplus's and swish's beta, zero and negative too), signed zeros, float32
subnormal ties, float64 results that must not be nudged, and integer modes exact past 2^53. Oracles: the CPU
reference (bit for bit, or 1 ulp where the formula is another's), float64 formulas and Python integers by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from gpu_reference_emulation import agreement_ulps, make_available, run_both

import sigdnn

TINY = 2.0**-149  # float32's least subnormal: x / 2 is a tie that only the side of the true value breaks
VALUES = np.concatenate(
    [
        np.arange(-8, 8) * 0.75,
        [0.0, -0.0, 2.5, -2.5, 40.0, -40.0, 1e-3, -1e-3, 0.5, 2.0, TINY, -TINY, 3 * TINY],
        [np.inf, -np.inf, np.nan],
    ]
)
REFORMULATED = {"elu_fwd", "softplus_fwd"}
CASES = [
    ("relu_fwd", {"relu_lower_clip": 0.5, "relu_upper_clip": 2.0, "relu_lower_clip_slope": 0.25}),
    ("relu_fwd", {"relu_lower_clip": -1.0, "relu_lower_clip_slope": 0.0}),
    ("relu_bwd", {"relu_lower_clip": 0.5, "relu_upper_clip": 2.0, "relu_lower_clip_slope": 0.25}),
    ("relu_bwd", {"relu_upper_clip": 1.5}),
    ("elu_fwd", {"elu_alpha": 0.5}),
    ("elu_bwd", {"elu_alpha": 2.5}),
    ("softplus_fwd", {"softplus_beta": 2.5}),
    ("softplus_fwd", {"softplus_beta": -0.75}),
    ("softplus_bwd", {"softplus_beta": 2.5}),
    ("swish_fwd", {"swish_beta": 1.75}),
    ("swish_fwd", {"swish_beta": -0.5}),
    ("swish_fwd", {"swish_beta": 0.0}),
    ("swish_bwd", {"swish_beta": 1.75}),
    ("swish_bwd", {"swish_beta": -0.5}),
]


def run(monkeypatch: pytest.MonkeyPatch, mode: str, params: dict, x: np.ndarray, dy: np.ndarray | None = None):
    make_available(monkeypatch)
    g = sigdnn.Graph(mode, io_dtype="float32", compute_dtype="float32")
    ports = [g.tensor("dy", x.shape)] if dy is not None else []
    ports.append(g.tensor("x", x.shape))
    g.pointwise(mode, *ports, name="pw", **params).set_output(True)
    inputs = {"x": x} if dy is None else {"dy": dy, "x": x}
    got, cpu = run_both(g, inputs)
    return got["pw::out_0"], cpu["pw::out_0"]


@pytest.mark.parametrize(("mode", "params"), CASES, ids=lambda c: str(c))
def test_each_parameter_reaches_the_result(monkeypatch: pytest.MonkeyPatch, mode: str, params: dict) -> None:
    x = VALUES.astype(np.float32)
    dy = np.linspace(-2.0, 3.0, x.size).astype(np.float32) if mode.endswith("_bwd") else None
    got, cpu = run(monkeypatch, mode, params, x, dy)
    assert agreement_ulps(got, cpu).max() <= (1 if mode in REFORMULATED else 0)


def test_hand_worked_values_of_the_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.array([-2.0, 0.25, 1.0, 3.0], np.float32)
    relu = {"relu_lower_clip": 0.5, "relu_upper_clip": 2.0, "relu_lower_clip_slope": 0.25}
    got, _ = run(monkeypatch, "relu_fwd", relu, x)
    assert got.tolist() == [0.5 + 0.25 * -2.5, 0.5 + 0.25 * -0.25, 1.0, 2.0]
    got, _ = run(monkeypatch, "relu_bwd", relu, x, np.full(4, 2.0, np.float32))
    assert got.tolist() == [0.5, 0.5, 2.0, 0.0]
    got, _ = run(monkeypatch, "elu_fwd", {"elu_alpha": 0.5}, x)
    assert got.tolist() == [np.float32(0.5 * math.expm1(-2.0)), 0.25, 1.0, 3.0]
    got, _ = run(monkeypatch, "softplus_fwd", {"softplus_beta": 2.0}, x)
    want = [math.log1p(math.exp(2.0 * v)) / 2.0 for v in x.tolist()]
    np.testing.assert_allclose(got, np.array(want, np.float32), rtol=2**-23)
    got, _ = run(monkeypatch, "swish_fwd", {"swish_beta": 0.0}, x)
    assert got.tolist() == (x * 0.5).tolist()  # sigmoid(0) = 1/2 exactly, no nudge off the half
    got, _ = run(monkeypatch, "swish_fwd", {"swish_beta": 2.0}, x)
    want = [v / (1.0 + math.exp(-2.0 * v)) for v in x.tolist()]
    np.testing.assert_allclose(got, np.array(want, np.float32), rtol=2**-23)


@pytest.mark.parametrize(
    ("beta", "want"), [(1.75, [TINY, -0.0, 2 * TINY]), (-0.5, [0.0, -TINY, TINY]), (0.0, [0.0, -0.0, 2 * TINY])]
)
def test_swish_of_a_subnormal_rounds_to_the_side_of_its_true_value(monkeypatch: pytest.MonkeyPatch, beta, want) -> None:
    """swish(x) = x sigmoid(beta x) = x / 2 + beta x^2 / 4 + ...: for x = 2^-149 the half is a float32 tie, broken
    upward for beta > 0 and downward for beta < 0 (for -x the mirror); beta = 0 gives x / 2 exactly, which rounds
    to even. 3 * 2^-149: the half 1.5 * 2^-149 is a tie as well (to 2 * 2^-149 from above, 2^-149 from below)."""
    x = np.array([TINY, -TINY, 3 * TINY], np.float32)
    got, cpu = run(monkeypatch, "swish_fwd", {} if beta is None else {"swish_beta": beta}, x)
    np.testing.assert_array_equal(got, np.array(want, np.float32))
    np.testing.assert_array_equal(cpu, got)


@pytest.mark.parametrize(
    ("params", "negative"),
    [
        ({}, [False, False, False, False]),
        ({"relu_lower_clip_slope": 0.5}, [False, False, True, False]),  # -1 * 0.5: -0.5
        ({"relu_lower_clip": 0.0, "relu_upper_clip": 4.0}, [False, False, False, False]),
        ({"relu_lower_clip": -1.0, "relu_upper_clip": 0.0}, [False, False, True, False]),  # -0.0 >= 0: the clip
    ],
)
def test_relu_of_negative_zero_is_positive_zero(monkeypatch: pytest.MonkeyPatch, params: dict, negative) -> None:
    """x <= lower clip takes the clipped branch and x >= upper clip the clip, -0.0 included: +0.0 out, as the
    CPU reference."""
    x = np.array([-0.0, 0.0, -1.0, 0.5], np.float32)
    got, cpu = run(monkeypatch, "relu_fwd", params, x)
    assert np.signbit(got).tolist() == np.signbit(cpu).tolist() == negative


def test_integer_division_and_remainder_truncate_in_int64(monkeypatch: pytest.MonkeyPatch) -> None:
    """C's truncating division and fmod's remainder (the dividend's sign), 0 for a zero divisor, exact past 2^53
    (2^53 + 1 = 3 x 3002399751580331; float64 would read it as 2^53)."""
    make_available(monkeypatch)
    a = np.array([2**53 + 1, -(2**53 + 1), 2**53 + 1, 7, -7, 7, -7, 5, 0], np.int64)
    b = np.array([3, 3, 2, 2, 2, -2, -2, 0, 0], np.int64)
    want = {
        "div": [3002399751580331, -3002399751580331, 2**52, 3, -3, -3, 3, 0, 0],
        "mod": [0, 0, 1, 1, -1, 1, -1, 0, 0],
    }
    for mode, expected in want.items():
        g = sigdnn.Graph(mode, io_dtype="int64", compute_dtype="int64")
        g.pointwise(mode, g.tensor("a", a.shape), g.tensor("b", b.shape), name="pw").set_output(True)
        got, cpu = run_both(g, {"a": a, "b": b})
        assert got["pw::out_0"].tolist() == cpu["pw::out_0"].tolist() == expected, mode


def test_elu_of_positive_zero_takes_the_exponential_branch(monkeypatch: pytest.MonkeyPatch) -> None:
    """elu(+0) = alpha (e^0 - 1) = alpha * +0: -0.0 for a negative alpha (x > 0 selects x itself)."""
    got, cpu = run(monkeypatch, "elu_fwd", {"elu_alpha": -0.5}, np.array([0.0, 1.0], np.float32))
    assert np.signbit(got).tolist() == np.signbit(cpu).tolist() == [True, False]


@pytest.mark.parametrize("mode", ["swish_fwd", "gelu_fwd", "gelu_approx_tanh_fwd"])
def test_float64_results_off_the_half_are_not_nudged(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """Only an exact x / 2 of a nonzero x is moved by an ulp: x sigma(x) for x = 40 and 1e300 is x itself in
    float64, and 0 stays 0 (not the least subnormal)."""
    make_available(monkeypatch)
    g = sigdnn.Graph(mode, io_dtype="float64", compute_dtype="float64")
    g.pointwise(mode, g.tensor("x", (3,)), name="pw").set_output(True)
    got, cpu = run_both(g, {"x": np.array([40.0, 1e300, 0.0])})
    assert got["pw::out_0"].tolist() == cpu["pw::out_0"].tolist() == [40.0, 1e300, 0.0]


def _wrap(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


BIG = 2**53 + 1  # float64 reads it as 2^53
INTEGER_CASES = {
    "add": lambda a, b: _wrap(a + b),
    "sub": lambda a, b: _wrap(a - b),
    "mul": lambda a, b: _wrap(a * b),
    "add_square": lambda a, b: _wrap(a + b * b),
    "max": max,
    "min": min,
    "cmp_eq": lambda a, b: int(a == b),
    "cmp_neq": lambda a, b: int(a != b),
    "cmp_gt": lambda a, b: int(a > b),
    "cmp_ge": lambda a, b: int(a >= b),
    "cmp_lt": lambda a, b: int(a < b),
    "cmp_le": lambda a, b: int(a <= b),
    "abs": lambda a: abs(a),
    "neg": lambda a: -a,
    "identity": lambda a: a,
    "ceil": lambda a: a,
    "floor": lambda a: a,
}


@pytest.mark.parametrize("mode", sorted(INTEGER_CASES))
def test_integer_modes_are_exact_in_int64(monkeypatch: pytest.MonkeyPatch, mode: str) -> None:
    """int64 operands past 2^53 and products that wrap: the int64 result, where float64 would round."""
    make_available(monkeypatch)
    a = [BIG, -BIG, BIG, 2**62, 3, 2**53]
    b = [2**53, BIG, BIG + 1, 4, -BIG, 2**53 + 2]
    fn = INTEGER_CASES[mode]
    arity = 2 if fn in (max, min) else fn.__code__.co_argcount
    g = sigdnn.Graph(mode, io_dtype="int64", compute_dtype="int64")
    ports = [g.tensor(n, (len(a),)) for n in ("a", "b")[:arity]]
    g.pointwise(mode, *ports, name="pw").set_output(True)
    inputs = {"a": np.array(a, np.int64), "b": np.array(b, np.int64)}
    got, cpu = run_both(g, {n: inputs[n] for n in ("a", "b")[:arity]})
    want = [fn(x, y) for x, y in zip(a, b)] if arity == 2 else [fn(x) for x in a]
    assert got["pw::out_0"].tolist() == want
    assert cpu["pw::out_0"].tolist() == want


def test_binary_select_and_logical_modes_in_int64(monkeypatch: pytest.MonkeyPatch) -> None:
    make_available(monkeypatch)
    a = np.array([BIG, -BIG, 0, 7], np.int64)
    b = np.array([2**53, 0, 0, -BIG], np.int64)
    mask = np.array([1, 0, 5, 0], np.int64)
    want = {"logical_and": [1, 0, 0, 1], "logical_or": [1, 1, 0, 1], "binary_select": [BIG, 0, 0, -BIG]}
    for mode, expected in want.items():
        g = sigdnn.Graph(mode, io_dtype="int64", compute_dtype="int64")
        names = ("a", "b", "mask") if mode == "binary_select" else ("a", "b")
        g.pointwise(mode, *(g.tensor(n, (4,)) for n in names), name="pw").set_output(True)
        got, cpu = run_both(g, {n: v for n, v in zip(names, (a, b, mask))})
        assert got["pw::out_0"].tolist() == cpu["pw::out_0"].tolist() == expected, mode


def test_pow_of_any_nan_to_zero_and_one_to_any_nan_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """IEEE's pow (docs/ops.md), signaling NaNs included, as the CPU reference's since it stopped taking glibc's NaN
    there (CUDA's pow is documented to give 1 for x^+-0 with any x, a NaN too; the emulator's does); NaN to another
    power is NaN."""
    make_available(monkeypatch)
    nans = np.array([0x7F800001, 0x7FC00000], np.uint32).view(np.float32)
    a = np.concatenate([nans, nans, np.ones(2, np.float32), nans, [2.0, 0.5]]).astype(np.float32)
    b = np.concatenate([np.zeros(2), -np.zeros(2), nans, [2.0, 2.0, 3.0, -1.0]]).astype(np.float32)
    g = sigdnn.Graph("pow", io_dtype="float32", compute_dtype="float32")
    g.pointwise("pow", g.tensor("a", a.shape), g.tensor("b", b.shape), name="pw").set_output(True)
    got, cpu = run_both(g, {"a": a, "b": b})
    want = [1, 1, 1, 1, 1, 1, np.nan, np.nan, 8, 2]
    np.testing.assert_array_equal(got["pw::out_0"], np.array(want, np.float32))
    np.testing.assert_array_equal(cpu["pw::out_0"], np.array(want, np.float32))
