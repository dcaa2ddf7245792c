"""Reference pointwise: every cuDNN / hipDNN mode, in float64 (int64 for integer compute).

Formulas follow docs/ops.md; backward modes take (dy, x) and return dy * f'(x).
Each is evaluated in a form where no step cancels (erfc for the gelu tails,
sigma(x) sigma(-x) for sigmoid / tanh slopes), so the float64 value is good
to a few float64 ulps everywhere and rounds to the output dtype within 1 ulp
of the true result: tests/plan_builders/reference/test_pointwise.py checks
every mode against torch that way.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import ClassVar

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.pointwise import Pointwise
from sigdnn.plan_builders.reference import error_function
from sigdnn.plan_builders.reference.base import Compute, NarrowCompute, ReferenceBuilder, chunks, storer
from sigdnn.plan_builders.reference.math.parallel import parallel_map
from sigdnn.plan_builders.reference.math.sink import Sink
from sigdnn.registry.contracts import BuildContext
from sigdnn.registry.engine_ids import IN_TREE

Array = np.ndarray
_SQRT_2 = math.sqrt(2.0)
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_C = 0.044715


def erf(x: Array) -> Array:
    """erf elementwise (NumPy has none): vectorized, within ~1 float64 ulp (see error_function.py)."""
    return error_function.erf(x)


def erfc(x: Array) -> Array:
    """1 - erf(x) without the cancellation for large x (the gelu tails), within ~2 float64 ulp."""
    return error_function.erfc(x)


def sigmoid(x: Array) -> Array:
    """1 / (1 + e^-x) without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def sigmoid_slope(x: Array) -> Array:
    """sigma(x) * sigma(-x) = sigma'(x) = e^-|x| / (1 + e^-|x|)^2.

    The textbook s * (1 - s) (and tanh's 1 - t^2) cancels once s (or t) rounds
    to 1: for x > ~37 it is 0 in float64 while the true value is still a
    float32 normal.
    """
    e = np.exp(-np.abs(x))
    return e / ((1.0 + e) * (1.0 + e))


def _trunc_div(a: Array, b: Array) -> Array:
    """C-style integer division (toward zero); x / 0 is 0 (undefined in C)."""
    safe = np.where(b == 0, 1, b)
    floor = a // safe  # no abs(): |int64 min| overflows
    return np.where(b == 0, 0, floor + ((a % safe != 0) & ((a < 0) ^ (safe < 0))))


def _relu_fwd(x: Array, p: Pointwise) -> Array:
    lo, hi, slope = _relu_params(p)
    if slope == 0 and hi == math.inf and _max_is_select(lo):
        return np.maximum(x, lo)  # one pass; the np.where chain below costs ~25x as much
    below = lo if slope == 0 else lo + slope * (x - lo)
    return np.where(x <= lo, below, np.where(x >= hi, hi, x))


def _max_is_select(lo: float) -> bool:
    """Whether max(x, lo) is "lo where x <= lo, else x" for every x (NaN x stays NaN in both):
    not for a NaN lo (max gives NaN), nor for lo = -0.0 (max(+0.0, -0.0) is +0.0, the select -0.0)."""
    return not math.isnan(lo) and (lo != 0 or math.copysign(1.0, lo) > 0)


def _relu_bwd(dy: Array, x: Array, p: Pointwise) -> Array:
    lo, hi, slope = _relu_params(p)
    return dy * np.where(x <= lo, slope, np.where(x >= hi, 0.0, 1.0))


def _relu_params(p: Pointwise) -> tuple[float, float, float]:
    lo = 0.0 if p.relu_lower_clip is None else p.relu_lower_clip
    hi = math.inf if p.relu_upper_clip is None else p.relu_upper_clip
    slope = 0.0 if p.relu_lower_clip_slope is None else p.relu_lower_clip_slope
    return lo, hi, slope


def _pow(a: Array, b: Array) -> Array:
    """IEEE pow, a^0 = 1^b = 1 for every a and b, whatever the platform's libm does with a signaling NaN there
    (glibc's gives NaN; a float16 NaN such as 0x7C01 is a signaling one, and stays one in float64)."""
    return np.where((b == 0) | (a == 1), 1.0, np.power(a, b))


def _int_pow(a: Array, b: Array) -> Array:
    """a ** b in integers; a negative power is the real result truncated toward zero (C)."""
    unit = np.where(a == 1, 1, np.where((a == -1) & (b % 2 == 0), 1, np.where(a == -1, -1, 0)))
    return np.where(b < 0, unit, np.power(a, np.maximum(b, 0)))


def _off_the_half(x: Array, y: Array, toward: float) -> Array:
    """y, except where it is exactly x/2 (x != 0): there one float64 ulp toward ``toward``.

    gelu, its tanh form and swish are x/2 + e(x) with e of one sign for all
    x != 0, but for tiny x below float64's resolution: the float64 value is
    x/2 exactly. At an odd subnormal x of the output format x/2 is a tie, and
    rounding it to even lands on the wrong side half the time. One float64 ulp
    toward the true value is a sticky bit (as in round-to-odd): it keeps the
    side without crossing a rounding boundary of any format narrower than
    float64.
    """
    return np.where((y == 0.5 * x) & (x != 0), np.nextafter(y, toward), y)


def _gelu_fwd(x: Array) -> Array:
    """0.5 x (1 + erf(x/sqrt2)) written with erfc: 1 + erf is 0 in float64 for x < ~-8.3.

    gelu(x) - x/2 = x erf(x/sqrt2) / 2 > 0 for x != 0.
    """
    return _off_the_half(x, 0.5 * x * erfc(-x / _SQRT_2), math.inf)


def _gelu_bwd(dy: Array, x: Array) -> Array:
    return dy * (0.5 * erfc(-x / _SQRT_2) + x * _INV_SQRT_2PI * np.exp(-0.5 * x * x))


def _gelu_tanh_u(x: Array) -> Array:
    return _SQRT_2_OVER_PI * (x + _GELU_C * x * x * x)


def _gelu_tanh_fwd(x: Array) -> Array:
    """0.5 x (1 + tanh u) = x sigma(2u): 1 + tanh u is 0 in float64 for x < ~-6.

    x sigma(2u) - x/2 = x tanh(u) / 2 > 0 for x != 0 (u has x's sign).
    """
    return _off_the_half(x, x * sigmoid(2 * _gelu_tanh_u(x)), math.inf)


def _gelu_tanh_bwd(dy: Array, x: Array) -> Array:
    """d/dx x sigma(2u) = sigma(2u) + 2 x u' sigma'(2u), every term free of cancellation."""
    u = _gelu_tanh_u(x)
    du = _SQRT_2_OVER_PI * (1 + 3 * _GELU_C * x * x)
    return dy * (sigmoid(2 * u) + 2 * x * du * sigmoid_slope(2 * u))


def _beta(value: float | None) -> float:
    return 1.0 if value is None else value


def _swish_fwd(x: Array, beta: float) -> Array:
    """x sigma(beta x); minus x/2 that is x (sigma(beta x) - 1/2), of beta's sign for x != 0 (0 when beta is)."""
    y = x * sigmoid(beta * x)
    return y if beta == 0 else _off_the_half(x, y, math.copysign(math.inf, beta))


def _swish_bwd(dy: Array, x: Array, beta: float) -> Array:
    return dy * (sigmoid(beta * x) + beta * x * sigmoid_slope(beta * x))


# mode -> f(*inputs, op): each returns float64 (or bool) values.
FLOAT_MODES: dict[str, Callable[..., Array]] = {
    "add": lambda a, b, p: a + b,
    "sub": lambda a, b, p: a - b,
    "mul": lambda a, b, p: a * b,
    "div": lambda a, b, p: a / b,
    "add_square": lambda a, b, p: a + b * b,
    "max": lambda a, b, p: np.maximum(a, b),
    "min": lambda a, b, p: np.minimum(a, b),
    "mod": lambda a, b, p: np.fmod(a, b),
    "pow": lambda a, b, p: _pow(a, b),
    "cmp_eq": lambda a, b, p: a == b,
    "cmp_neq": lambda a, b, p: a != b,
    "cmp_gt": lambda a, b, p: a > b,
    "cmp_ge": lambda a, b, p: a >= b,
    "cmp_lt": lambda a, b, p: a < b,
    "cmp_le": lambda a, b, p: a <= b,
    "logical_and": lambda a, b, p: (a != 0) & (b != 0),
    "logical_or": lambda a, b, p: (a != 0) | (b != 0),
    "logical_not": lambda a, p: a == 0,
    "abs": lambda a, p: np.abs(a),
    "neg": lambda a, p: -a,
    "ceil": lambda a, p: np.ceil(a),
    "floor": lambda a, p: np.floor(a),
    "sqrt": lambda a, p: np.sqrt(a),
    "rsqrt": lambda a, p: 1.0 / np.sqrt(a),
    "reciprocal": lambda a, p: 1.0 / a,
    "exp": lambda a, p: np.exp(a),
    "log": lambda a, p: np.log(a),
    "sin": lambda a, p: np.sin(a),
    "cos": lambda a, p: np.cos(a),
    "tan": lambda a, p: np.tan(a),
    "erf": lambda a, p: erf(a),
    "identity": lambda a, p: a,
    "relu_fwd": _relu_fwd,
    "relu_bwd": _relu_bwd,
    "tanh_fwd": lambda x, p: np.tanh(x),
    "tanh_bwd": lambda dy, x, p: dy * (4.0 * sigmoid_slope(2.0 * x)),
    "sigmoid_fwd": lambda x, p: sigmoid(x),
    "sigmoid_bwd": lambda dy, x, p: dy * sigmoid_slope(x),
    # np.where, not np.minimum(x, 0), which gives +0 for x = -0: elu(-0) is alpha * expm1(-0) = -0.
    "elu_fwd": lambda x, p: np.where(x > 0, x, _beta(p.elu_alpha) * np.expm1(np.where(x > 0, 0.0, x))),
    "elu_bwd": lambda dy, x, p: dy * np.where(x > 0, 1.0, _beta(p.elu_alpha) * np.exp(np.minimum(x, 0))),
    "gelu_fwd": lambda x, p: _gelu_fwd(x),
    "gelu_bwd": lambda dy, x, p: _gelu_bwd(dy, x),
    "gelu_approx_tanh_fwd": lambda x, p: _gelu_tanh_fwd(x),
    "gelu_approx_tanh_bwd": lambda dy, x, p: _gelu_tanh_bwd(dy, x),
    "softplus_fwd": lambda x, p: np.logaddexp(0.0, _beta(p.softplus_beta) * x) / _beta(p.softplus_beta),
    "softplus_bwd": lambda dy, x, p: dy * sigmoid(_beta(p.softplus_beta) * x),
    "swish_fwd": lambda x, p: _swish_fwd(x, _beta(p.swish_beta)),
    "swish_bwd": lambda dy, x, p: _swish_bwd(dy, x, _beta(p.swish_beta)),
    "binary_select": lambda a, b, mask, p: np.where(mask != 0, a, b),
}

# Modes whose integer-compute result differs from the float formula's.
INTEGER_MODES: dict[str, Callable[..., Array]] = {
    "div": lambda a, b, p: _trunc_div(a, b),
    "mod": lambda a, b, p: np.fmod(a, np.where(b == 0, 1, b)),
    "pow": lambda a, b, p: _int_pow(a, b),
}
INTEGER_EXACT = frozenset(
    {"add", "sub", "mul", "add_square", "max", "min", "abs", "neg", "ceil", "floor", "identity", "binary_select"}
    | {m for m in FLOAT_MODES if m.startswith(("cmp_", "logical_"))}
    | set(INTEGER_MODES)
)


def gen_index(x: Array, p: Pointwise) -> Array:
    """Each element's index along ``axis`` of x's dims."""
    shape = [1] * x.ndim
    shape[p.axis] = x.shape[p.axis]
    return np.broadcast_to(np.arange(x.shape[p.axis]).reshape(shape), x.shape)


# Input dtypes narrow enough to tabulate: every bit pattern, as the unsigned integer that indexes it.
_TABLE_INDEX = {
    DataType.FLOAT16: np.uint16,
    DataType.BFLOAT16: np.uint16,
    DataType.FP8_E4M3: np.uint8,
    DataType.FP8_E5M2: np.uint8,
}


def tabulated_input(node: Node, graph: Graph) -> DataType | None:
    """The input dtype when the node is a unary float pointwise op on a float type of at most 16 bits:
    then its result is a function of 2^16 (or 2^8) input patterns, and a table of the rounded results
    replaces per-element work. None otherwise."""
    op: Pointwise = node.op
    if len(op.inputs()) != 1 or op.mode == "gen_index" or graph.compute_dtype_of(node).is_integer:
        return None
    dtype = graph.dtype_of(graph.tensors[op.in_0])
    return dtype if dtype in _TABLE_INDEX else None


def _tabulated(fn: Callable[..., Array], op: Pointwise, x_dtype: DataType, y_dtype: DataType) -> NarrowCompute:
    """A unary op through a table of its results on every input pattern, each computed exactly as the
    float64 path computes it (widened, evaluated in float64, rounded once by the same store): a lookup
    gives the same bits at the cost of a gather. Outputs smaller than the table take the float64 path
    directly, as do inputs given in another dtype (validation's carried-error runs move an input by its
    bound in float64); the table is built on the first large one."""
    index = _TABLE_INDEX[x_dtype]
    store = storer(y_dtype)
    tables: list[Array] = []

    def table() -> Array:
        if not tables:
            patterns = np.arange(np.iinfo(index).max + 1, dtype=index).view(x_dtype.numpy)
            values = np.empty(patterns.shape, y_dtype.numpy)
            with np.errstate(all="ignore"):
                store(values, fn(patterns.astype(np.float64), op))
            tables.append(values)
        return tables[0]

    def compute(ins: dict[str, Array], sinks: dict[str, Sink]) -> dict[str, Array]:
        out = sinks["out_0"].array
        x = np.broadcast_to(ins["in_0"], out.shape)
        if out.size < np.iinfo(index).max + 1 or x.dtype != x_dtype.numpy:
            store(out, fn(x.astype(np.float64), op))
            return {}
        # gathered as unsigned integers of the output's size: np.take on ml_dtypes' types loses values
        word = np.dtype(f"u{out.itemsize}")
        values, bits, dest = table().view(word), x.view(index), out.view(word)
        parallel_map(lambda b: np.take(values, bits[b], out=dest[b], mode="clip"), chunks(out.shape))
        return {}

    return compute


class ReferencePointwise(ReferenceBuilder):
    name: ClassVar[str] = "reference.pointwise"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)

    def computes_in_integers(self, node: Node, graph: Graph) -> bool:
        return graph.compute_dtype_of(node).is_integer and node.op.mode in INTEGER_EXACT

    def narrow_keeps_for(self, node: Node, graph: Graph) -> tuple[np.dtype, ...]:
        """The dtype a table reads as bits; looked up per node, as bfloat16's and fp8's come from ml_dtypes (slow
        to import)."""
        x_dtype = tabulated_input(node, graph)
        return self.narrow_keeps if x_dtype is None else (x_dtype.numpy,)

    def narrow_for(self, node: Node, graph: Graph) -> bool:
        return tabulated_input(node, graph) is not None

    def make_compute(self, node: Node, graph: Graph, context: BuildContext) -> Compute | NarrowCompute:
        op: Pointwise = node.op
        x_dtype = tabulated_input(node, graph)
        if x_dtype is not None:
            return _tabulated(FLOAT_MODES[op.mode], op, x_dtype, graph.dtype_of(graph.tensors[op.out_0]))
        ports = list(op.inputs())
        if op.mode == "gen_index":
            return lambda ins: {"out_0": gen_index(ins["in_0"], op)}
        integer = self.computes_in_integers(node, graph)
        fn = (INTEGER_MODES.get(op.mode) if integer else None) or FLOAT_MODES[op.mode]
        return lambda ins: {"out_0": fn(*(ins[p] for p in ports), op)}
