"""What each pointwise mode computes in a cuTile kernel: one expression over the node's arguments.

``FLOAT_MODES`` / ``INTEGER_MODES`` map a mode to an emitter that turns the
names of its arguments (already converted to the node's compute type) into
an expression and says what kind of value it yields: "f" float32, "i" the
integer compute type, "b" bool. ``codegen`` assembles these expressions into
a kernel's text. Float64 parameters enter as float32 literals (pairs where one
float32 would round them too far); results stored in 16 or 8 bits use the
fast-tier formulas of ``_f32math``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

FLT_MAX = float(np.finfo(np.float32).max)


@attrs.frozen
class NodeSpec:
    """One node of a kernel: its mode, the values it reads, its result's dtype, its compute type, its parameters."""

    mode: str
    args: tuple[int, ...]  # value ids: inputs first (0..), then node results in order
    dtype: str  # the declared dtype of the node's result
    compute: str  # "float", "int32" or "int64"
    params: tuple[tuple[str, Any], ...] = ()


def literal(v: float) -> str:
    """A finite parameter as a kernel literal (kernels have no inf or NaN literal)."""
    if not math.isfinite(v):
        raise ValueError(f"parameter {v} is not finite")
    return repr(float(v))


def float32_pair(v: float) -> tuple[str, str]:
    """A float64 parameter as two float32 literals whose sum is it (to ~2^-48)."""
    hi = float(np.float32(v))
    return literal(hi), literal(float(np.float32(v - hi)))


def param(node: NodeSpec, name: str, default: float) -> float:
    """The node's parameter ``name`` as a float, ``default`` where it is unset."""
    value = dict(node.params).get(name)
    return default if value is None else float(value)


Emit = Callable[[list[str], NodeSpec], tuple[str, str]]


def _at_least(x: str, bound: float) -> str:
    """``x >= bound`` that also holds for x = inf when the bound is +inf (no inf literal in kernels)."""
    return f"{x} > {literal(FLT_MAX)}" if math.isinf(bound) else f"{x} >= {literal(bound)}"


def _affine(x: str, scale: float, offset: float) -> str:
    """scale * x + offset for float64 constants, rounded about once even where the two terms cancel.

    relu's leaky branch L + s (x - L) is s x + L (1 - s): both constants
    are split in float32 pairs and each pair meets x in one FMA.
    """
    s_hi, s_lo = float32_pair(scale)
    c_hi, c_lo = float32_pair(offset)
    terms = [f"fma({s_hi}, {x}, {c_hi})" if offset else f"{s_hi} * {x}"]
    if float(s_lo) or float(c_lo):
        terms.append(f"fma({s_lo}, {x}, {c_lo})")
    return " + ".join(terms)


def _relu_fwd(a: list[str], n: NodeSpec) -> tuple[str, str]:
    (x,) = a
    lo = param(n, "relu_lower_clip", 0.0)
    hi = param(n, "relu_upper_clip", math.inf)
    slope = param(n, "relu_lower_clip_slope", 0.0)
    below = literal(lo) if slope == 0 else _affine(x, slope, lo * (1.0 - slope))
    inner = x if math.isinf(hi) else f"ct.where({x} >= {literal(hi)}, {literal(hi)}, {x})"  # x >= inf gives inf: x
    return f"ct.where({x} <= {literal(lo)}, {below}, {inner})", "f"


def _relu_bwd(a: list[str], n: NodeSpec) -> tuple[str, str]:
    dy, x = a
    lo = param(n, "relu_lower_clip", 0.0)
    hi = param(n, "relu_upper_clip", math.inf)
    slope = param(n, "relu_lower_clip_slope", 0.0)
    return f"{dy} * ct.where({x} <= {literal(lo)}, {literal(slope)}, ct.where({_at_least(x, hi)}, 0.0, 1.0))", "f"


FAST_TIER = frozenset({"float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"})  # results stored with <= 11 bits


def is_fast_tier(n: NodeSpec) -> bool:
    """Whether the node's result is stored in a float narrow enough for the fast formulas (_f32math)."""
    return n.dtype in FAST_TIER


def _call(fn: str, fast: str | None = None) -> Emit:
    return lambda a, n: (f"{fast if fast and is_fast_tier(n) else fn}({', '.join(a)})", "f")


def _swish(fn: str) -> Emit:
    def emit(a: list[str], n: NodeSpec) -> tuple[str, str]:
        beta = param(n, "swish_beta", 1.0)
        if is_fast_tier(n):
            return f"fast_{fn}({', '.join(a)}, {literal(beta)})", "f"
        hi, lo = float32_pair(beta)
        return f"{fn}({', '.join(a)}, {hi}, {lo})", "f"

    return emit


def _softplus_fwd(a: list[str], n: NodeSpec) -> tuple[str, str]:
    beta = param(n, "softplus_beta", 1.0)
    if is_fast_tier(n) and beta != 0.0:  # the fast form multiplies by 1/beta (one more rounding) instead of dividing
        return f"fast_softplus_fwd({a[0]}, {literal(beta)}, {literal(1.0 / beta)})", "f"
    return f"softplus_fwd({a[0]}, {literal(beta)})", "f"


def _softplus_bwd(a: list[str], n: NodeSpec) -> tuple[str, str]:
    beta = param(n, "softplus_beta", 1.0)
    if is_fast_tier(n):
        return f"fast_softplus_bwd({a[0]}, {a[1]}, {literal(beta)})", "f"
    hi, lo = float32_pair(beta)
    return f"softplus_bwd({a[0]}, {a[1]}, {hi}, {lo})", "f"


def _elu(fn: str) -> Emit:
    return lambda a, n: (
        f"{'fast_' if is_fast_tier(n) else ''}{fn}({', '.join(a)}, {literal(param(n, 'elu_alpha', 1.0))})",
        "f",
    )


FLOAT_MODES: dict[str, Emit] = {
    "add": lambda a, n: (f"{a[0]} + {a[1]}", "f"),
    "sub": lambda a, n: (f"{a[0]} - {a[1]}", "f"),
    "mul": lambda a, n: (f"{a[0]} * {a[1]}", "f"),
    "div": lambda a, n: (f"{a[0]} / {a[1]}", "f"),
    "add_square": lambda a, n: (f"fma({a[1]}, {a[1]}, {a[0]})", "f"),  # one rounding, as on the GPU
    "max": lambda a, n: (f"ct.maximum({a[0]}, {a[1]}, propagate_nan=True)", "f"),
    "min": lambda a, n: (f"ct.minimum({a[0]}, {a[1]}, propagate_nan=True)", "f"),
    "mod": _call("fmod"),
    "pow": _call("ct.pow", "fast_pow"),
    "cmp_eq": lambda a, n: (f"{a[0]} == {a[1]}", "b"),
    "cmp_neq": lambda a, n: (f"{a[0]} != {a[1]}", "b"),
    "cmp_gt": lambda a, n: (f"{a[0]} > {a[1]}", "b"),
    "cmp_ge": lambda a, n: (f"{a[0]} >= {a[1]}", "b"),
    "cmp_lt": lambda a, n: (f"{a[0]} < {a[1]}", "b"),
    "cmp_le": lambda a, n: (f"{a[0]} <= {a[1]}", "b"),
    "logical_and": lambda a, n: (f"({a[0]} != 0.0) & ({a[1]} != 0.0)", "b"),
    "logical_or": lambda a, n: (f"({a[0]} != 0.0) | ({a[1]} != 0.0)", "b"),
    "logical_not": lambda a, n: (f"{a[0]} == 0.0", "b"),
    "abs": _call("ct.abs"),
    "neg": lambda a, n: (f"-{a[0]}", "f"),
    "ceil": _call("ct.ceil"),
    "floor": _call("ct.floor"),
    "sqrt": _call("ct.sqrt"),
    "rsqrt": lambda a, n: (f"1.0 / ct.sqrt({a[0]})", "f"),  # ct.rsqrt is the approximate MUFU.RSQ
    "reciprocal": lambda a, n: (f"{'fast_rcp' if is_fast_tier(n) else '1.0 / '}({a[0]})", "f"),
    "exp": _call("ct.exp", "fast_exp"),
    "log": _call("ct.log", "fast_log"),
    "sin": _call("ct.sin"),
    "cos": _call("ct.cos"),
    "tan": _call("ct.tan"),
    "erf": _call("erf", "fast_erf"),
    "identity": lambda a, n: (a[0], "f"),
    "relu_fwd": _relu_fwd,
    "relu_bwd": _relu_bwd,
    "tanh_fwd": _call("ct.tanh"),
    "tanh_bwd": _call("tanh_bwd", "fast_tanh_bwd"),
    "sigmoid_fwd": _call("sigmoid", "fast_sigmoid"),
    "sigmoid_bwd": _call("sigmoid_bwd", "fast_sigmoid_bwd"),
    "elu_fwd": _elu("elu_fwd"),
    "elu_bwd": _elu("elu_bwd"),
    "gelu_fwd": _call("gelu_fwd", "fast_gelu_fwd"),
    "gelu_bwd": _call("gelu_bwd", "fast_gelu_bwd"),
    "gelu_approx_tanh_fwd": _call("gelu_tanh_fwd", "fast_gelu_tanh_fwd"),
    "gelu_approx_tanh_bwd": _call("gelu_tanh_bwd", "fast_gelu_tanh_bwd"),
    "softplus_fwd": _softplus_fwd,
    "softplus_bwd": _softplus_bwd,
    "swish_fwd": _swish("swish_fwd"),
    "swish_bwd": _swish("swish_bwd"),
    "binary_select": lambda a, n: (f"ct.where({a[2]} != 0.0, {a[0]}, {a[1]})", "f"),
}

INTEGER_MODES: dict[str, Emit] = {
    "add": FLOAT_MODES["add"],
    "sub": FLOAT_MODES["sub"],
    "mul": FLOAT_MODES["mul"],
    "add_square": lambda a, n: (f"{a[0]} + {a[1]} * {a[1]}", "i"),
    "max": lambda a, n: (f"ct.maximum({a[0]}, {a[1]})", "i"),
    "min": lambda a, n: (f"ct.minimum({a[0]}, {a[1]})", "i"),
    "div": lambda a, n: (f"int_div({a[0]}, {a[1]})", "i"),
    "mod": lambda a, n: (f"int_mod({a[0]}, {a[1]})", "i"),
    **{m: FLOAT_MODES[m] for m in ("cmp_eq", "cmp_neq", "cmp_gt", "cmp_ge", "cmp_lt", "cmp_le")},
    "logical_and": lambda a, n: (f"({a[0]} != 0) & ({a[1]} != 0)", "b"),
    "logical_or": lambda a, n: (f"({a[0]} != 0) | ({a[1]} != 0)", "b"),
    "logical_not": lambda a, n: (f"{a[0]} == 0", "b"),
    "abs": lambda a, n: (f"ct.abs({a[0]})", "i"),
    "neg": lambda a, n: (f"-{a[0]}", "i"),
    "ceil": lambda a, n: (a[0], "i"),
    "floor": lambda a, n: (a[0], "i"),
    "identity": lambda a, n: (a[0], "i"),
    "binary_select": lambda a, n: (f"ct.where({a[2]} != 0, {a[0]}, {a[1]})", "i"),
}
for _mode in ("add", "sub", "mul"):
    INTEGER_MODES[_mode] = (lambda e: lambda a, n: (e(a, n)[0], "i"))(FLOAT_MODES[_mode])


def supports(mode: str, compute: str) -> bool:
    """Whether a kernel can compute ``mode`` in ``compute`` ("float", "int32", "int64")."""
    if mode == "gen_index":
        return True
    return mode in (FLOAT_MODES if compute == "float" else INTEGER_MODES)
