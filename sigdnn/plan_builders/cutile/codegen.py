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
from collections.abc import Sequence
from importlib import resources
from typing import Any

import attrs

from sigdnn.plan_builders.cutile.layout import IterSpace
from sigdnn.plan_builders.cutile.pointwise_expressions import FLOAT_MODES, INTEGER_MODES, NodeSpec, is_fast_tier

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
    if len(nodes) == 1 and nodes[0].mode in WIDE_MODES and nodes[0].compute == "float" and is_fast_tier(nodes[0]):
        return WIDE_TILE
    heavy = any(n.mode in HEAVY_MODES and n.compute == "float" for n in nodes)
    return HEAVY_TILE if heavy else DEFAULT_TILE


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


FP8_LIBRARY = '''
def to_fp8_e5m2(x):
    """float32 -> e5m2 rounding past 61440 to +-inf, as IEEE and the reference do (cuTile's cast saturates)."""
    bits = ct.bitcast(ct.astype(x, ct.float8_e5m2), ct.uint8)
    bits = ct.where(x >= 61440.0, ct.full(x.shape, 0x7C, ct.uint8), bits)
    bits = ct.where(x <= -61440.0, ct.full(x.shape, 0xFC, ct.uint8), bits)
    return ct.bitcast(bits, ct.float8_e5m2)


def to_fp8_e4m3(x):
    """float32 -> e4m3fn, NaN past 464 as the reference rounds (cuTile's cast saturates to 448)."""
    bits = ct.bitcast(ct.astype(x, ct.float8_e4m3fn), ct.uint8)
    return ct.bitcast(ct.where(ct.abs(x) > 464.0, ct.full(x.shape, 0x7F, ct.uint8), bits), ct.float8_e4m3fn)
'''
FP8_ROUNDING = {"fp8_e5m2": "to_fp8_e5m2", "fp8_e4m3": "to_fp8_e4m3"}


def _round(expr: str, kind: str, dtype: str, compute: str) -> str:
    """A node's result rounded to its declared dtype (``kind`` f / i / b)."""
    if (kind, dtype) in (("f", "float32"), ("i", compute)):
        return expr
    if dtype == "bool":
        return expr if kind == "b" else f"({expr}) != 0"
    if kind == "b":
        expr = f"ct.where({expr}, 1, 0)"
    if dtype in FP8_ROUNDING:
        return f"{FP8_ROUNDING[dtype]}(ct.astype({expr}, ct.float32))"
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
    return f"{header}{library()}\n{INTEGER_LIBRARY}\n{FP8_LIBRARY}\n\n@ct.kernel\ndef kernel({', '.join(params)}):\n{body}\n"
