"""int64 pointwise above 2**53, against Python integers: exact with an integer compute dtype, float64 without.

Intended behaviour (graph.compute_dtype_of): a node whose compute dtype is
unset computes in float32 as cuDNN's default does, so the reference computes
in float64 and rounds the result to the output dtype once; 2**60 + 1 + 1 is
then 2**60. With compute dtype int64 (or int32), the integer-exact modes
compute in int64 and wrap modulo 2**64 as the hardware does; division and
remainder truncate toward zero as C does (x / 0 and x % 0 give 0).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sigdnn

INT64 = st.one_of(
    st.integers(-(2**63), 2**63 - 1),
    st.integers(2**53 - 8, 2**53 + 8),
    st.integers(2**60 - 4, 2**60 + 4),
    st.sampled_from([-(2**63), 2**63 - 1, 0, 1, -1, 2, -2, 3, -3]),
)


def wrap(v: int) -> int:
    return (v + 2**63) % 2**64 - 2**63


def trunc_div(a: int, b: int) -> int:
    if b == 0:
        return 0
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_mod(a: int, b: int) -> int:
    return 0 if b == 0 else a - b * trunc_div(a, b)


def int_pow(a: int, b: int) -> int:
    if b >= 0:
        return pow(a, b, 2**64)
    return 1 if a == 1 else (1 if b % 2 == 0 else -1) if a == -1 else 0


EXACT = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "add_square": lambda a, b: a + b * b,
    "max": lambda a, b: max(a, b),
    "min": lambda a, b: min(a, b),
    "div": trunc_div,
    "mod": c_mod,
    "pow": int_pow,
    "cmp_eq": lambda a, b: a == b,
    "cmp_lt": lambda a, b: a < b,
    "cmp_ge": lambda a, b: a >= b,
    "logical_and": lambda a, b: a != 0 and b != 0,
    "abs": lambda a: abs(a),
    "neg": lambda a: -a,
    "identity": lambda a: a,
    "ceil": lambda a: a,
    "floor": lambda a: a,
}


def run(mode: str, a: list[int], b: list[int], compute: str | None) -> np.ndarray:
    g = sigdnn.Graph("ints", io_dtype="int64", compute_dtype=compute)
    x = g.tensor("a", (len(a),))
    ins = {"a": np.array(a, np.int64)}
    if mode in ("abs", "neg", "identity", "ceil", "floor"):
        y = g.pointwise(mode, x, name="n")
    else:
        y = g.pointwise(mode, x, g.tensor("b", (len(b),)), name="n")
        ins["b"] = np.array(b, np.int64)
    y.set_output(True).set_name("y")
    if mode.startswith(("cmp_", "logical_")):
        y.set_data_type("bool")
    return sigdnn.Executor().run(g, ins)["y"]


@pytest.mark.parametrize("mode", list(EXACT))
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_integer_compute_is_exact_at_full_int64_width(mode: str, data: st.DataObject) -> None:
    a = data.draw(st.lists(INT64, min_size=1, max_size=20))
    b = data.draw(st.lists(INT64 if mode != "pow" else st.integers(-3, 70), min_size=len(a), max_size=len(a)))
    got = run(mode, a, b, "int64").tolist()
    fn = EXACT[mode]
    want = [fn(x) if fn.__code__.co_argcount == 1 else fn(x, y) for x, y in zip(a, b)]
    want = [w if isinstance(w, bool) else wrap(w) for w in want]
    assert got == want


def test_worked_cases_above_two_to_the_53() -> None:
    big = 2**60 + 1
    assert run("add", [big], [1], "int64").tolist() == [2**60 + 2]
    assert run("add", [big], [1], None).tolist() == [2**60]  # float64 compute: 2**60 + 1 rounds to 2**60
    assert run("div", [-(2**63), 7, -7], [3, -2, 0], "int64").tolist() == [-3074457345618258602, -3, 0]
    assert run("mod", [-(2**63) + 1, -7, 7], [2**62, 2, 0], "int64").tolist() == [-(2**62) + 1, -1, 0]
    assert run("mul", [2**62], [4], "int64").tolist() == [0]  # wraps modulo 2**64
    assert run("sub", [2**53 + 1], [0], None).tolist() == [2**53]  # the tie rounds to even


@pytest.mark.parametrize(("compute", "want"), [("int64", [2**60 + 1, -(2**62) - 1]), (None, [2**60, -(2**62)])])
def test_binary_select_keeps_int64_values_with_integer_compute(compute: str | None, want: list[int]) -> None:
    g = sigdnn.Graph("sel", io_dtype="int64", compute_dtype=compute)
    a, b, m = (g.tensor(n, (2,)) for n in "abm")
    g.pointwise("binary_select", a, b, m, name="n").set_output(True).set_name("y")
    ins = {"a": np.array([2**60 + 1, 5]), "b": np.array([7, -(2**62) - 1]), "m": np.array([3, 0])}
    assert sigdnn.Executor().run(g, ins)["y"].tolist() == want


FLOAT = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "max": lambda a, b: max(a, b),
    "neg": lambda a: -a,
}


def to_int64(v: float) -> int:
    """The documented float -> int64 store: truncate, NaN/inf -> 0, out of range clipped."""
    if not math.isfinite(v):
        return 0
    return max(-(2**63), min(2**63 - 1, math.trunc(v)))


@pytest.mark.parametrize("mode", list(FLOAT))
@settings(max_examples=20, deadline=None)
@given(data=st.data())
def test_unset_compute_dtype_computes_in_float64_and_rounds_once(mode: str, data: st.DataObject) -> None:
    a = data.draw(st.lists(INT64, min_size=1, max_size=20))
    b = data.draw(st.lists(INT64, min_size=len(a), max_size=len(a)))
    got = run(mode, a, b, None).tolist()
    fn = FLOAT[mode]
    # Python floats are IEEE doubles: float(int) and each operation round to nearest even, as NumPy's do.
    want = [to_int64(fn(float(x)) if mode == "neg" else fn(float(x), float(y))) for x, y in zip(a, b)]
    assert got == want
