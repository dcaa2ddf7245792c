"""Pointwise kernels as generated cuTile source: one kernel per pattern of nodes.

A ``KernelSpec`` describes what one launch computes: the inputs (storage
dtype and how each is read, ``layout.IterSpace``), the nodes (mode, the
values they read, their parameters, the dtype their result is declared in)
and the outputs. ``generate`` turns it into the text of a Python module with
one ``@ct.kernel``; a single node is a spec of one node, a fused region a
spec of several, and values between nodes of one spec stay in registers.

Semantics are the reference's, value by value: every node's result is
rounded to its tensor's declared dtype (as the reference stores it, also
for tensors that never reach memory), and every node reads its inputs
converted from their declared dtypes to its compute type: float32 for
floating-point compute (bf16 / f16 compute too: float32 is more precise, so
within their tolerance), the integer type for integer compute.

Storage: bool and fp8 arrays reach the kernel as uint8 (cuTile's array
interface has no type string for them) and are reinterpreted in the kernel.
Pure Python: the text is tested on the CPU through ``emulator``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any

import attrs
import numpy as np

from sigdnn.plan_builders.cutile.layout import IterSpace

FLT_MAX = float(np.finfo(np.float32).max)
DEFAULT_TILE = 1024  # elements per block (the tile sweep: docs/experiments.md)
# Modes evaluated by a transcendental or many-term formula: their kernels are arithmetic-bound at 1024
# elements per block, and twice the elements per block (more independent work per thread) brought
# rsqrt, log, sin, cos, tan, erf, the gelus, softplus and swish_bwd 5-20% closer to the copy roofline
# on the H200; fmod's exact short way 3.69 -> 3.92 TB/s.
HEAVY_TILE = 2048
HEAVY_MODES = frozenset({"rsqrt", "exp", "log", "sin", "cos", "tan", "erf", "pow", "mod", "tanh_fwd", "tanh_bwd", "sigmoid_fwd",
                         "sigmoid_bwd", "elu_fwd", "elu_bwd", "gelu_fwd", "gelu_bwd", "gelu_approx_tanh_fwd",
                         "gelu_approx_tanh_bwd", "softplus_fwd", "softplus_bwd", "swish_fwd", "swish_bwd"})  # fmt: skip
# Single-node kernels of these modes computing the fast tier (16- or 8-bit results) ran 3-10% faster at 4096
# elements per block than at 2048 on the H200 (gelu_bwd, pow and the light modes lost there).
WIDE_TILE = 4096
WIDE_MODES = frozenset({"log", "cos", "erf", "gelu_fwd", "gelu_approx_tanh_bwd", "softplus_fwd"})

# Declared dtype -> (the kernel's dtype name, how the array is passed: its own dtype or as uint8).
CT_DTYPES = {
    "float32": "ct.float32",
    "float16": "ct.float16",
    "bfloat16": "ct.bfloat16",
    "fp8_e4m3": "ct.float8_e4m3fn",
    "fp8_e5m2": "ct.float8_e5m2",
    "int8": "ct.int8",
    "uint8": "ct.uint8",
    "int32": "ct.int32",
    "int64": "ct.int64",
    "bool": "ct.bool_",
}
AS_BYTES = frozenset({"bool", "fp8_e4m3", "fp8_e5m2"})  # passed as uint8 arrays
COMPUTE = {"float": "ct.float32", "int32": "ct.int32", "int64": "ct.int64"}


@attrs.frozen
class NodeSpec:
    mode: str
    args: tuple[int, ...]  # value ids: inputs first (0..), then node results in order
    dtype: str  # the declared dtype of the node's result
    compute: str  # "float", "int32" or "int64"
    params: tuple[tuple[str, Any], ...] = ()


@attrs.frozen
class KernelSpec:
    space: IterSpace
    inputs: tuple[str, ...]  # declared dtype of each input (value ids 0..)
    nodes: tuple[NodeSpec, ...]
    outputs: tuple[int, ...]  # value id stored to each output
    tile: int = DEFAULT_TILE

    @property
    def full_tiles(self) -> int:
        """Blocks that read and write whole tiles (no bounds checks); one more block takes the rest."""
        return self.space.size // self.tile

    @property
    def split(self) -> tuple[bool, bool]:
        """(any whole tiles, a partial last tile): flat arrays are passed as those two parts."""
        return self.full_tiles > 0, self.space.size % self.tile > 0

    def text_key(self) -> KernelSpec:
        """The spec with what the kernel's text does not depend on (sizes, spans) zeroed: one kernel per key."""
        main, tail = self.split
        space = attrs.evolve(
            self.space,
            size=int(main) * self.tile
            + int(tail),  # what the text depends on: whole tiles or not, a partial one or not
            dims=self.space.dims if self.space.gathers else (),
            inputs=tuple(attrs.evolve(a, span=0) for a in self.space.inputs),
        )
        return attrs.evolve(self, space=space)

    def value_dtype(self, value: int) -> str:
        n = len(self.inputs)
        return self.inputs[value] if value < n else self.nodes[value - n].dtype


def default_tile(nodes: Sequence[NodeSpec]) -> int:
    """Elements per block of a kernel computing ``nodes``: HEAVY_TILE when a float node's formula is heavy,
    WIDE_TILE for one node of a WIDE_MODES mode in the fast tier (a fused region keeps HEAVY_TILE: not measured)."""
    if len(nodes) == 1 and nodes[0].mode in WIDE_MODES and nodes[0].compute == "float" and _fast(nodes[0]):
        return WIDE_TILE
    heavy = any(n.mode in HEAVY_MODES and n.compute == "float" for n in nodes)
    return HEAVY_TILE if heavy else DEFAULT_TILE


def _lit(v: float) -> str:
    if not math.isfinite(v):
        raise ValueError(f"parameter {v} is not finite")
    return repr(float(v))


def _split(v: float) -> tuple[str, str]:
    """A float64 parameter as two float32 literals whose sum is it (to ~2^-48)."""
    hi = float(np.float32(v))
    return _lit(hi), _lit(float(np.float32(v - hi)))


def _param(node: NodeSpec, name: str, default: float) -> float:
    value = dict(node.params).get(name)
    return default if value is None else float(value)


# ---------------------------------------------------------------------------
# Modes: each emits an expression over argument names converted to the node's
# compute type, and says what kind of value it yields: "f" float32, "i" the
# integer compute type, "b" bool.

Emit = Callable[[list[str], NodeSpec], tuple[str, str]]


def _at_least(x: str, bound: float) -> str:
    """``x >= bound`` that also holds for x = inf when the bound is +inf (no inf literal in kernels)."""
    return f"{x} > {_lit(FLT_MAX)}" if math.isinf(bound) else f"{x} >= {_lit(bound)}"


def _affine(x: str, scale: float, offset: float) -> str:
    """scale * x + offset for float64 constants, rounded about once even where the two terms cancel.

    relu's leaky branch L + s (x - L) is s x + L (1 - s): both constants
    are split in float32 pairs and each pair meets x in one FMA.
    """
    s_hi, s_lo = _split(scale)
    c_hi, c_lo = _split(offset)
    terms = [f"fma({s_hi}, {x}, {c_hi})" if offset else f"{s_hi} * {x}"]
    if float(s_lo) or float(c_lo):
        terms.append(f"fma({s_lo}, {x}, {c_lo})")
    return " + ".join(terms)


def _relu_fwd(a: list[str], n: NodeSpec) -> tuple[str, str]:
    (x,) = a
    lo = _param(n, "relu_lower_clip", 0.0)
    hi = _param(n, "relu_upper_clip", math.inf)
    slope = _param(n, "relu_lower_clip_slope", 0.0)
    below = _lit(lo) if slope == 0 else _affine(x, slope, lo * (1.0 - slope))
    inner = x if math.isinf(hi) else f"ct.where({x} >= {_lit(hi)}, {_lit(hi)}, {x})"  # x >= inf gives inf: x
    return f"ct.where({x} <= {_lit(lo)}, {below}, {inner})", "f"


def _relu_bwd(a: list[str], n: NodeSpec) -> tuple[str, str]:
    dy, x = a
    lo = _param(n, "relu_lower_clip", 0.0)
    hi = _param(n, "relu_upper_clip", math.inf)
    slope = _param(n, "relu_lower_clip_slope", 0.0)
    return f"{dy} * ct.where({x} <= {_lit(lo)}, {_lit(slope)}, ct.where({_at_least(x, hi)}, 0.0, 1.0))", "f"


FAST_TIER = frozenset({"float16", "bfloat16", "fp8_e4m3", "fp8_e5m2"})  # results stored with <= 11 bits


def _fast(n: NodeSpec) -> bool:
    """Whether the node's result is stored in a float narrow enough for the fast formulas (_f32math)."""
    return n.dtype in FAST_TIER


def _call(fn: str, fast: str | None = None) -> Emit:
    return lambda a, n: (f"{fast if fast and _fast(n) else fn}({', '.join(a)})", "f")


def _swish(fn: str) -> Emit:
    def emit(a: list[str], n: NodeSpec) -> tuple[str, str]:
        beta = _param(n, "swish_beta", 1.0)
        if _fast(n):
            return f"fast_{fn}({', '.join(a)}, {_lit(beta)})", "f"
        hi, lo = _split(beta)
        return f"{fn}({', '.join(a)}, {hi}, {lo})", "f"

    return emit


def _softplus_fwd(a: list[str], n: NodeSpec) -> tuple[str, str]:
    beta = _param(n, "softplus_beta", 1.0)
    if _fast(n) and beta != 0.0:  # the fast form multiplies by 1/beta (one more rounding) instead of dividing
        return f"fast_softplus_fwd({a[0]}, {_lit(beta)}, {_lit(1.0 / beta)})", "f"
    return f"softplus_fwd({a[0]}, {_lit(beta)})", "f"


def _softplus_bwd(a: list[str], n: NodeSpec) -> tuple[str, str]:
    beta = _param(n, "softplus_beta", 1.0)
    if _fast(n):
        return f"fast_softplus_bwd({a[0]}, {a[1]}, {_lit(beta)})", "f"
    hi, lo = _split(beta)
    return f"softplus_bwd({a[0]}, {a[1]}, {hi}, {lo})", "f"


def _elu(fn: str) -> Emit:
    return lambda a, n: (
        f"{'fast_' if _fast(n) else ''}{fn}({', '.join(a)}, {_lit(_param(n, 'elu_alpha', 1.0))})",
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
    "reciprocal": lambda a, n: (f"{'fast_rcp' if _fast(n) else '1.0 / '}({a[0]})", "f"),
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

ARITY = {"binary_select": 3}


def supports(mode: str, compute: str) -> bool:
    """Whether a kernel can compute ``mode`` in ``compute`` ("float", "int32", "int64")."""
    if mode == "gen_index":
        return True
    return mode in (FLOAT_MODES if compute == "float" else INTEGER_MODES)


# ---------------------------------------------------------------------------
# Source


def library() -> str:
    """The float32 math library (``_f32math.py`` below its marker line)."""
    text = resources.files("sigdnn.plan_builders.cutile").joinpath("_f32math.py").read_text()
    marker = "# ---- kernel library"
    return text[text.index("\n", text.index(marker)) + 1 :]


INTEGER_LIBRARY = '''
def int_div(a, b):
    """C division (toward zero); x / 0 gives 0, as the reference defines it."""
    safe = ct.where(b == 0, 1, b)
    q = ct.abs(a) // ct.abs(safe)
    q = ct.where((a < 0) != (safe < 0), -q, q)
    return ct.where(b == 0, 0, q)


def int_mod(a, b):
    """C remainder (sign of a); x mod 0 gives 0."""
    safe = ct.where(b == 0, 1, b)
    r = ct.abs(a) % ct.abs(safe)
    return ct.where(b == 0, 0, ct.where(a < 0, -r, r))

'''


def _convert(name: str, dtype: str, compute: str) -> str:
    """A value stored as ``dtype`` read by a node computing in ``compute``."""
    target = COMPUTE[compute]
    if dtype == "bool":
        one, zero = ("1.0", "0.0") if compute == "float" else ("1", "0")
        cast = f"ct.where({name}, {one}, {zero})"
        return cast if compute == "float" else f"ct.astype({cast}, {target})"
    if dtype == "float32" and compute == "float":
        return name
    return f"ct.astype({name}, {target})"


def _round(expr: str, kind: str, dtype: str, compute: str) -> str:
    """A node's result rounded to its declared dtype (``kind`` f / i / b)."""
    if (kind, dtype) in (("f", "float32"), ("i", compute)):
        return expr
    if dtype == "bool":
        return expr if kind == "b" else f"({expr}) != 0"
    if kind == "b":
        expr = f"ct.where({expr}, 1, 0)"
    return f"ct.astype({expr}, {CT_DTYPES[dtype]})"


def _tile_shape(access: Any, dims: tuple[int, ...], tile: int) -> str:
    """How one tile of the walk reads a gathered input: "row" (contiguous), "constant" (one element) or "gather".

    When the innermost merged dim is a multiple of the tile, a tile never
    crosses it: with stride 1 there (and outer strides multiples of the
    tile) the tile is a contiguous, aligned run; with stride 0 there it is
    a single element.
    """
    *outer, inner = access.strides
    if dims[-1] % tile:
        return "gather"
    if inner == 1 and all(s % tile == 0 for s in outer):
        return "row"
    if inner == 0:
        return "constant"
    return "gather"


def _coordinates(src: Any, index: str, dims: tuple[int, ...], name: str) -> list[str]:
    """Emit the coordinates of flat index ``index`` over ``dims`` (innermost first; the outermost needs no modulo)."""
    q = index
    for axis in range(len(dims) - 1, 0, -1):
        src.emit(f"{name}{axis} = {q} % {dims[axis]}")
        src.emit(f"{name}q{axis} = {q} // {dims[axis]}")
        q = f"{name}q{axis}"
    src.emit(f"{name}0 = {q}")
    return [f"{name}{axis}" for axis in range(len(dims))]


def _offset(coords: list[str], strides: tuple[int, ...]) -> str:
    return " + ".join(f"{c} * {s}" if s != 1 else c for c, s in zip(coords, strides) if s) or "0"


def _reinterpret(load: str, dtype: str) -> str:
    """What a load of a ``dtype`` array gives, in the kernel: bool and fp8 arrive as bytes."""
    if dtype == "bool":
        return f"{load} != 0"
    if dtype in AS_BYTES:
        return f"ct.bitcast({load}, {CT_DTYPES[dtype]})"
    return load


def _parts(main: bool, tail: bool, tile: int) -> list[tuple[str | None, str, str, str]]:
    """(condition line, array suffix, tile index, extra arguments) of each part of a flat access.

    Whole tiles come from the arrays' main part, read and written without
    bounds checks (cuTile then uses 16-byte accesses); the partial last tile
    from their tail part, checked. A block is one or the other.
    """
    unchecked = ", check_bounds=False"
    if main and tail:
        return [("if whole:", "", "bid", unchecked), ("else:", "t", "0", "")]
    if main:
        return [(None, "", "bid", unchecked)]
    return [(None, "t", "0", "")]


def _split_params(name: str, main: bool, tail: bool) -> list[str]:
    return ([name] if main else []) + ([f"{name}t"] if tail else [])


class Source:
    """Lines of the kernel body, with the value names it has defined."""

    def __init__(self, spec: KernelSpec) -> None:
        self.spec = spec
        self.lines: list[str] = []
        self.full: dict[int, bool] = {}  # value id -> holds a full tile (else a broadcast (1,) one)
        self._converted: dict[tuple[int, str], str] = {}

    def emit(self, line: str) -> None:
        self.lines.append(line)

    def arg(self, value: int, compute: str) -> str:
        """The name of ``value`` read in ``compute``, converting once per (value, compute)."""
        key = (value, compute)
        if key not in self._converted:
            expr = _convert(f"v{value}", self.spec.value_dtype(value), compute)
            if expr == f"v{value}":
                self._converted[key] = expr
            else:
                name = f"v{value}_{compute}"
                self.emit(f"{name} = {expr}")
                self._converted[key] = name
        return self._converted[key]


def kernel_name(spec: KernelSpec) -> str:
    return "pointwise_" + hashlib.sha1(repr(spec.text_key()).encode()).hexdigest()[:16]


def generate(spec: KernelSpec) -> str:
    """The module text (without the line that binds ``ct``) whose ``kernel`` computes ``spec``."""
    space, tile = spec.space, spec.tile
    if tile & (tile - 1):
        raise ValueError(f"tile {tile} is not a power of two")
    src = Source(spec)
    shapes = {k: _tile_shape(a, space.dims, tile) for k, a in enumerate(space.inputs) if a.kind == "gather"}
    gathered = any(kind == "gather" for kind in shapes.values())
    needs_index = gathered or any(n.mode == "gen_index" for n in spec.nodes)
    src.emit("bid = ct.bid(0)")
    if needs_index:
        src.emit(f"i = bid * {tile} + ct.arange({tile}, dtype=ct.int32)")
    coords = _coordinates(src, "i", space.dims, "c") if gathered else []
    first_coords = _coordinates(src, f"bid * {tile}", space.dims, "s") if len(set(shapes.values()) - {"gather"}) else []
    main, tail = spec.split
    if main and tail:
        src.emit(f"whole = bid < y0.shape[0] // {tile}")
    flat: dict[int, str] = {}  # input -> the expression reading it, filled in per part
    for k, (dtype, access) in enumerate(zip(spec.inputs, space.inputs, strict=True)):
        if access.kind == "flat":
            flat[k] = dtype
            continue
        shape = "scalar" if access.kind == "scalar" else shapes[k]
        if shape == "scalar":
            load = f"ct.load(x{k}, index=(0,), shape=(1,))"
        elif shape == "row":  # the tile's elements are contiguous in this input: one whole-tile load
            load = f"ct.load(x{k}, index=(({_offset(first_coords, access.strides)}) // {tile},), shape=({tile},), check_bounds=False)"
        elif shape == "constant":  # the whole tile reads one element of this input
            load = f"ct.load(x{k}, index=({_offset(first_coords, access.strides)},), shape=(1,))"
        else:
            load = f"ct.gather(x{k}, {_offset(coords, access.strides)})"
        src.emit(f"v{k} = {_reinterpret(load, dtype)}")
        src.full[k] = shape in ("row", "gather")
    if flat:
        parts = _parts(main, tail, tile)
        for condition, suffix, index, checked in parts:
            indent = "    " if condition is not None else ""
            if condition is not None:
                src.emit(condition)
            for k, dtype in flat.items():
                load = f"ct.load(x{k}{suffix}, index=({index},), shape=({tile},){checked}, allow_tma=False)"
                src.emit(f"{indent}v{k} = {_reinterpret(load, dtype)}")
        for k in flat:
            src.full[k] = True
    first = len(spec.inputs)
    for j, node in enumerate(spec.nodes):
        value = first + j
        if node.mode == "gen_index":
            stride, extent = dict(node.params)["walk"]
            expr, kind, full = f"(i // {stride}) % {extent}", "i", True
        else:
            args = [src.arg(a, node.compute) for a in node.args]
            table = FLOAT_MODES if node.compute == "float" else INTEGER_MODES
            expr, kind = table[node.mode](args, node)
            full = any(src.full[a] for a in node.args)
        src.emit(f"v{value} = {_round(expr, kind, node.dtype, node.compute)}")
        src.full[value] = full
    stores = []
    for k, value in enumerate(spec.outputs):
        dtype = spec.value_dtype(value)
        tile_expr = f"v{value}"
        if not src.full[value]:
            tile_expr = f"ct.broadcast_to({tile_expr}, ({tile},))"
        if dtype == "bool":
            tile_expr = f"ct.astype(ct.where({tile_expr}, 1, 0), ct.uint8)"
        elif dtype in AS_BYTES:
            tile_expr = f"ct.bitcast({tile_expr}, ct.uint8)"
        src.emit(f"r{k} = {tile_expr}")
        stores.append(k)
    for condition, suffix, index, checked in _parts(main, tail, tile):
        indent = "    " if condition is not None else ""
        if condition is not None:
            src.emit(condition)
        for k in stores:
            src.emit(f"{indent}ct.store(y{k}{suffix}, index=({index},), tile=r{k}{checked}, allow_tma=False)")
    params = []
    for k, access in enumerate(space.inputs):
        params += _split_params(f"x{k}", main, tail) if access.kind == "flat" else [f"x{k}"]
    for k in range(len(spec.outputs)):
        params += _split_params(f"y{k}", main, tail)
    body = "\n".join(f"    {line}" for line in src.lines)
    header = f"# {kernel_name(spec)}: generated by sigdnn.plan_builders.cutile.codegen from\n# {spec.text_key()!r}\n"
    return f"{header}{library()}\n{INTEGER_LIBRARY}\n\n@ct.kernel\ndef kernel({', '.join(params)}):\n{body}\n"
