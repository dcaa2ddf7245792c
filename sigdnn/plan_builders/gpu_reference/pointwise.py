"""GPU reference pointwise: every mode as whole-array float64 steps (int64 for integer compute).

The formulas are the definitions of docs/ops.md in forms that do not
cancel (sigma(x) sigma(-x) for slopes, exp(-|x|) for sigmoid), so the
float64 value is within a few float64 ulps and its single rounding to a
float32 or narrower output almost never differs from the CPU reference's.
exp, log, sin, cos, tan, tanh and pow come from the GPU's float64 libm, which
may differ from NumPy's by an ulp of float64: docs/gpu_reference.md says how
agreement is counted. erf, which cuTile lacks in float64, comes from its
series (``error_function``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.pointwise import Pointwise
from sigdnn.plan_builders.gpu_reference.arrays import Array, maximum, minimum, row_major_index, where
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.plan_builders.gpu_reference.error_function import erf, erfc, exp_neg_square
from sigdnn.registry.engine_ids import IN_TREE

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_GELU_C = 0.044715
_SQRT_2 = math.sqrt(2.0)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def sigmoid(x: Array) -> Array:
    """1 / (1 + e^-x) without overflow: e = exp(-|x|) is at most 1."""
    e = (-x.apply("ABS")).apply("EXP")
    return where(x >= 0.0, 1.0 / (e + 1.0), e / (e + 1.0))


def sigmoid_slope(x: Array) -> Array:
    """sigma'(x) = e^-|x| / (1 + e^-|x|)^2, free of the cancellation in s (1 - s)."""
    e = (-x.apply("ABS")).apply("EXP")
    return e / ((e + 1.0) * (e + 1.0))


def expm1(x: Array) -> Array:
    """e^x - 1 accurate near 0 (Kahan): u = e^x; (u - 1) x / log(u), with u == 1 giving x."""
    u = x.apply("EXP")
    um1 = u - 1.0
    ratio = um1 * x / u.apply("LOG")
    return where(u == 1.0, x, where(um1 == -1.0, -1.0, where(x.apply("ABS") > 1.0, um1, ratio)))


def log1p(x: Array) -> Array:
    """log(1 + x) accurate near 0 (Kahan): u = 1 + x; log(u) x / (u - 1), with u == 1 giving x."""
    u = x + 1.0
    return where(u == 1.0, x, u.apply("LOG") * x / (u - 1.0))


def off_the_half(x: Array, y: Array, toward: float) -> Array:
    """y, except exactly x/2 (x != 0): there one float64 ulp toward ``toward`` (a sticky bit: the tiny-x
    ties of gelu-like modes then round to the side of the true value)."""
    nudged = y.apply("NEXT_UP" if toward > 0 else "NEXT_DOWN")
    finite = x.apply("ABS") < math.inf  # inf / 2 is inf: no tie to break (and NEXT_UP takes finite values)
    return where((y == x * 0.5) & (x != 0.0) & finite, nudged, y)


def _relu_params(p: Pointwise) -> tuple[float, float, float]:
    lo = 0.0 if p.relu_lower_clip is None else p.relu_lower_clip
    hi = math.inf if p.relu_upper_clip is None else p.relu_upper_clip
    slope = 0.0 if p.relu_lower_clip_slope is None else p.relu_lower_clip_slope
    return lo, hi, slope


def _relu_fwd(x: Array, p: Pointwise) -> Array:
    lo, hi, slope = _relu_params(p)
    below: Any = lo if slope == 0 else (x - lo) * slope + lo
    return where(x <= lo, below, where(x >= hi, hi, x))


def _relu_bwd(dy: Array, x: Array, p: Pointwise) -> Array:
    lo, hi, slope = _relu_params(p)
    return dy * where(x <= lo, slope, where(x >= hi, 0.0, 1.0))


def _beta(value: float | None) -> float:
    return 1.0 if value is None else value


def _swish_fwd(x: Array, beta: float) -> Array:
    y = x * sigmoid(x * beta)
    return y if beta == 0 else off_the_half(x, y, math.copysign(math.inf, beta))


def _gelu_tanh_u(x: Array) -> Array:
    return (x * x * x * _GELU_C + x) * _SQRT_2_OVER_PI


def _gelu_tanh_fwd(x: Array) -> Array:
    return off_the_half(x, x * sigmoid(_gelu_tanh_u(x) * 2.0), math.inf)


def _gelu_tanh_bwd(dy: Array, x: Array) -> Array:
    u = _gelu_tanh_u(x)
    du = (x * x * (3 * _GELU_C) + 1.0) * _SQRT_2_OVER_PI
    return dy * (sigmoid(u * 2.0) + x * du * sigmoid_slope(u * 2.0) * 2.0)


def _gelu_fwd(x: Array) -> Array:
    """x Phi(x) with Phi(x) = erfc(-x / sqrt2) / 2 (1 + erf cancels for x < 0); gelu(x) - x/2 > 0 for x != 0."""
    return off_the_half(x, x * erfc(-x / _SQRT_2) * 0.5, math.inf)


def _gelu_bwd(dy: Array, x: Array) -> Array:
    """Phi(x) + x phi(x), phi(x) = e^(-x^2 / 2) / sqrt(2 pi)."""
    finite = where(x.apply("ABS") < math.inf, x, math.nan)  # x e^(-x^2 / 2) at +-inf: inf * 0, NaN as in NumPy
    return dy * (erfc(-x / _SQRT_2) * 0.5 + x * exp_neg_square(finite, half=True) * _INV_SQRT_2PI)


def _softplus(x: Array, beta: float) -> Array:
    """log(1 + e^(beta x)) / beta = (max(bx, 0) + log1p(e^-|bx|)) / beta."""
    bx = x * beta
    return (maximum(bx, 0.0) + log1p((-bx.apply("ABS")).apply("EXP"))) / beta


def _elu_fwd(x: Array, alpha: float) -> Array:
    return where(x > 0.0, x, expm1(minimum(x, 0.0)) * alpha)


def _fmod(a: Array, b: Array) -> Array:
    return a.apply("FMOD", b)


def _trunc_div(a: Array, b: Array) -> Array:
    """C integer division (toward zero); x / 0 is 0."""
    safe = where(b == 0, 1, b)
    floor = a.apply("FLOORDIV", safe)
    inexact = (a.apply("PYMOD", safe) != 0) & ((a < 0).apply("NE", safe < 0))
    return where(b == 0, 0, floor + inexact)


def _int_pow(a: Array, b: Array) -> Array:
    """a ** b in integers, wrapping as int64 does; a negative power is the real result truncated toward zero.

    By squaring, one bit of the exponent per pass (cuTile has no integer pow)."""
    even = b.apply("PYMOD", 2) == 0
    unit = where(a == 1, 1, where((a == -1) & even, 1, where(a == -1, -1, 0)))
    power, base, exponent = where(a == a, 1, 0), a, maximum(b, 0)
    for _ in range(63):
        power = where(exponent.apply("PYMOD", 2) == 1, power * base, power)
        base, exponent = base * base, exponent.apply("FLOORDIV", 2)
    return where(b < 0, unit, power)


Mode = Callable[..., Array]
FLOAT_MODES: dict[str, Mode] = {
    "add": lambda a, b, p: a + b,
    "sub": lambda a, b, p: a - b,
    "mul": lambda a, b, p: a * b,
    "div": lambda a, b, p: a / b,
    "add_square": lambda a, b, p: a + b * b,
    "max": lambda a, b, p: maximum(a, b),
    "min": lambda a, b, p: minimum(a, b),
    "mod": lambda a, b, p: _fmod(a, b),
    "pow": lambda a, b, p: a.apply("POW", b),
    "cmp_eq": lambda a, b, p: a == b,
    "cmp_neq": lambda a, b, p: a != b,
    "cmp_gt": lambda a, b, p: a > b,
    "cmp_ge": lambda a, b, p: a >= b,
    "cmp_lt": lambda a, b, p: a < b,
    "cmp_le": lambda a, b, p: a <= b,
    "logical_and": lambda a, b, p: a & b,
    "logical_or": lambda a, b, p: a | b,
    "logical_not": lambda a, p: a.apply("NOT"),
    "abs": lambda a, p: a.apply("ABS"),
    "neg": lambda a, p: -a,
    "ceil": lambda a, p: a.apply("CEIL"),
    "floor": lambda a, p: a.apply("FLOOR"),
    "sqrt": lambda a, p: a.apply("SQRT"),
    "rsqrt": lambda a, p: 1.0 / a.apply("SQRT"),
    "reciprocal": lambda a, p: 1.0 / a,
    "exp": lambda a, p: a.apply("EXP"),
    "log": lambda a, p: a.apply("LOG"),
    "sin": lambda a, p: a.apply("SIN"),
    "cos": lambda a, p: a.apply("COS"),
    "tan": lambda a, p: a.apply("TAN"),
    "erf": lambda a, p: erf(a),
    "identity": lambda a, p: a,
    "relu_fwd": _relu_fwd,
    "relu_bwd": _relu_bwd,
    "tanh_fwd": lambda x, p: x.apply("TANH"),
    "tanh_bwd": lambda dy, x, p: dy * (sigmoid_slope(x * 2.0) * 4.0),
    "sigmoid_fwd": lambda x, p: sigmoid(x),
    "sigmoid_bwd": lambda dy, x, p: dy * sigmoid_slope(x),
    "elu_fwd": lambda x, p: _elu_fwd(x, _beta(p.elu_alpha)),
    "elu_bwd": lambda dy, x, p: dy * where(x > 0.0, 1.0, minimum(x, 0.0).apply("EXP") * _beta(p.elu_alpha)),
    "gelu_fwd": lambda x, p: _gelu_fwd(x),
    "gelu_bwd": lambda dy, x, p: _gelu_bwd(dy, x),
    "gelu_approx_tanh_fwd": lambda x, p: _gelu_tanh_fwd(x),
    "gelu_approx_tanh_bwd": lambda dy, x, p: _gelu_tanh_bwd(dy, x),
    "softplus_fwd": lambda x, p: _softplus(x, _beta(p.softplus_beta)),
    "softplus_bwd": lambda dy, x, p: dy * sigmoid(x * _beta(p.softplus_beta)),
    "swish_fwd": lambda x, p: _swish_fwd(x, _beta(p.swish_beta)),
    "swish_bwd": lambda dy, x, p: (
        dy * (sigmoid(x * _beta(p.swish_beta)) + x * _beta(p.swish_beta) * sigmoid_slope(x * _beta(p.swish_beta)))
    ),
    "binary_select": lambda a, b, mask, p: where(mask != 0.0, a, b),
}
INTEGER_MODES: dict[str, Mode] = {
    "div": lambda a, b, p: _trunc_div(a, b),
    "mod": lambda a, b, p: _fmod(a, where(b == 0, 1, b)),
    "pow": lambda a, b, p: _int_pow(a, b),
    "ceil": lambda a, p: a,  # (cuTile's ceil and floor take floats only)
    "floor": lambda a, p: a,
}
INTEGER_EXACT = frozenset(
    {"add", "sub", "mul", "add_square", "max", "min", "abs", "neg", "ceil", "floor", "identity", "binary_select"}
    | {m for m in FLOAT_MODES if m.startswith(("cmp_", "logical_"))}
    | set(INTEGER_MODES)
)


def gen_index(x: Array, axis: int) -> Array:
    """Each element's index along ``axis``: a gather from the column 0..n-1."""
    n = x.shape[axis]
    column = Array.from_host(x.gpu, np.arange(n), x.dtype)
    shape = [1] * len(x.shape)
    shape[axis] = n
    return column.take(np.broadcast_to(row_major_index((n,)).reshape(shape), x.shape))


class GpuReferencePointwise(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.pointwise"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)
    float_only: ClassVar[bool] = False

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        return graph.compute_dtype_of(node).is_integer and node.op.mode in INTEGER_EXACT

    def formula(self, node: Node, graph: Graph) -> Formula:
        op: Pointwise = node.op
        ports = list(op.inputs())
        if op.mode == "gen_index":
            return lambda ins: {"out_0": gen_index(ins["in_0"].broadcast_to(_out_dims(node, graph)), op.axis)}
        integer = self.computes_in_integers(node, graph)
        fn = (INTEGER_MODES.get(op.mode) if integer else None) or FLOAT_MODES[op.mode]
        return lambda ins: {"out_0": fn(*(ins[p] for p in ports), op)}


def _out_dims(node: Node, graph: Graph) -> tuple[int, ...]:
    return graph.tensors[node.op.out_0].dims
