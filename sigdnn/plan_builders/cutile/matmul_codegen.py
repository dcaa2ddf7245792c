"""The cuTile GEMM as generated source: one kernel per (dtypes, views, epilogue, tile configuration).

A block computes one TM x TN tile of C: the K loop loads a TM x TK tile of
A and a TK x TN tile of B (zero-padded past the edges, so M, N and K need
not be multiples of the tile), multiplies them on the tensor cores with a
float32 accumulator (``ct.mma``), and the epilogue runs on the accumulator
in registers before the one store. Blocks walk the output in grouped
("swizzled") order: ``group_m`` tile rows at a time, so the blocks running
together share A and B tiles in L2. The batch is the grid's second axis.
A persistent configuration launches only the blocks the SMs hold at once,
each walking tiles bid, bid + blocks, ... in that order: cuTile's load warp
then fetches the next tile's operands while the block runs this one's
epilogue.

Split-K (``split_k`` > 1, for GEMMs whose output tiles alone leave most SMs
idle: batch-1 inference, where M is one image's pixels or tokens) is two
kernels: the "split" stage's blocks, the grid's third axis, each multiply
one slice of the K steps into a float32 partial tile in the workspace
(splits x M x N); the "sum" stage adds a tile's partials in split order and
runs the epilogue and the store. Deterministic: no atomics.

The epilogue computes what the absorbed pointwise nodes compute one by one,
as the reference does: the product rounded to the matmul output's declared
dtype, then each node (bias add, activation, residual add) in float32
through the pointwise kernels' own formulas (``codegen.FLOAT_MODES`` and
the float32 library), each result rounded to its declared dtype.

Operand precision: float16 / bfloat16 tiles of one dtype go to the MMA as
they are; otherwise (float32, or operands of two dtypes) each tile widens
to float32 and goes as TF32 when the node's compute dtype is 16-bit (its
tolerance covers TF32's 10-bit mantissa), else as float32 (exact float32
products, no tensor cores).
"""

from __future__ import annotations

import hashlib

import attrs

from sigdnn.plan_builders.cutile import codegen
from sigdnn.plan_builders.cutile.codegen import CT_DTYPES, FLOAT_MODES, NodeSpec

MMA_INPUTS = ("float16", "bfloat16", "float32")
OUTPUTS = ("float16", "bfloat16", "float32")
STAGES = ("gemm", "split", "sum")
MAX_SPLITS = 65535  # CUDA's limit on a grid's third dim, which holds the splits


@attrs.frozen
class MatmulConfig:
    """Tuning knobs: block tile, K step, grouped order, and cuTile's hints (None: the compiler decides)."""

    tile_m: int = 128
    tile_n: int = 128
    tile_k: int = 64
    group_m: int = 8
    num_ctas: int | None = None
    occupancy: int | None = None
    latency: int | None = None  # ct.load's DRAM-traffic hint, 1..10
    warps: int | None = None  # num_worker_warps: 8 gives a 128-row tile two consumer warpgroups (m64 each)
    persistent: bool = False  # a grid of the blocks the SMs hold at once, each walking tiles bid, bid + blocks, ...
    split_k: int = 1  # blocks sharing one output tile's K steps (float32 partials summed by a second kernel)

    def __attrs_post_init__(self) -> None:
        for name in ("tile_m", "tile_n", "tile_k"):
            value = getattr(self, name)
            if value < 16 or value & (value - 1):
                raise ValueError(f"{name}={value}: tiles are powers of two >= 16")
        if self.group_m < 1:
            raise ValueError("group_m must be >= 1")
        if self.latency is not None and not 1 <= self.latency <= 10:
            raise ValueError(f"latency={self.latency}: cuTile takes 1..10")
        if self.warps not in (None, 4, 8):
            raise ValueError(f"warps={self.warps}: cuTile takes 4 or 8 worker warps")
        if not 1 <= self.split_k <= MAX_SPLITS or (self.split_k > 1 and self.persistent):
            raise ValueError(f"split_k={self.split_k}: 1..{MAX_SPLITS} (a grid's third dim), not persistent")

    @property
    def label(self) -> str:
        """e.g. ``128x128x64g8``, with ``c2`` (num_ctas), ``o2`` (occupancy), ``l3`` (latency), ``w8`` (worker
        warps) when set, ``p`` when persistent and ``s4`` when K is split among 4 blocks."""
        knobs = (("c", self.num_ctas), ("o", self.occupancy), ("l", self.latency), ("w", self.warps))
        hints = "".join(f"{p}{v}" for p, v in knobs if v) + ("p" if self.persistent else "")
        hints += f"s{self.split_k}" if self.split_k > 1 else ""
        return f"{self.tile_m}x{self.tile_n}x{self.tile_k}g{self.group_m}{hints}"


@attrs.frozen
class Operand:
    """How one array argument is laid out: storage dtype, view transposed, view batched."""

    dtype: str
    transposed: bool = False
    batched: bool = False


@attrs.frozen
class EpilogueStep:
    """One absorbed pointwise node: ``kind`` is "bias" (a row over N), "residual" (a full tile) or "unary"."""

    kind: str
    mode: str  # the pointwise mode ("add" for bias and residual)
    dtype: str  # the declared dtype of the node's result
    params: tuple[tuple[str, float], ...] = ()
    operand: Operand | None = None  # the array a bias / residual step reads


@attrs.frozen
class MatmulSpec:
    a: Operand
    b: Operand
    c: Operand  # the array stored: the last epilogue step's output (the matmul's own without an epilogue)
    product_dtype: str  # the declared dtype of the matmul node's output (the first rounding)
    mma: str  # "native" (f16 / bf16, one dtype), "tf32" or "float32" (each tile widened to float32 first)
    epilogue: tuple[EpilogueStep, ...] = ()
    config: MatmulConfig = MatmulConfig()
    stage: str = "gemm"  # "gemm" (the whole product and epilogue), or split-K's "split" and "sum" kernels

    def __attrs_post_init__(self) -> None:
        if self.stage not in STAGES:
            raise ValueError(f"stage={self.stage!r}: one of {', '.join(STAGES)}")
        batched = any(o.batched for o in (self.a, self.b, self.c))
        if self.stage != "gemm" and (batched or self.config.split_k == 1):
            raise ValueError("split-K stages take a split_k > 1 configuration and unbatched (2-D) views")

    @property
    def name(self) -> str:
        return "matmul_" + hashlib.sha1(repr(self).encode()).hexdigest()[:16]

    def source(self) -> str:
        return generate(self)


def _rounded(expr: str, dtype: str) -> str:
    """A float32 value rounded to ``dtype`` and read back as float32 (a no-op for float32)."""
    if dtype == "float32":
        return expr
    return f"ct.astype(ct.astype({expr}, {CT_DTYPES[dtype]}), ct.float32)"


def _load(name: str, operand: Operand, rows: str, cols: str, shape: tuple[int, int], latency: int | None) -> list[str]:
    """Lines loading the (rows, cols) tile of ``shape`` of an operand as a 2-D float tile ``name``."""
    index, tile = (cols, rows), shape[::-1]
    if not operand.transposed:
        index, tile = (rows, cols), shape
    if operand.batched:
        index, tile = ("z", *index), (1, *tile)
    hint = f", latency={latency}" if latency else ""
    lines = [
        f"{name} = ct.load({name}_array, index=({', '.join(index)},), shape={tile}, "
        f"padding_mode=ct.PaddingMode.ZERO{hint})"
    ]
    if operand.batched:
        lines.append(f"{name} = ct.reshape({name}, {tile[1:]})")
    if operand.transposed:
        lines.append(f"{name} = ct.transpose({name})")
    return lines


def _extent(operand: Operand, axis: int) -> str:
    """The array expression of the matrix's rows (axis 0) or cols (axis 1) extent."""
    position = (1 - axis if operand.transposed else axis) + int(operand.batched)
    return f"{{}}.shape[{position}]"


def _tile_order(cfg: MatmulConfig) -> list[str]:
    """Lines placing block ``bid`` on its output tile (bm, bn) in grouped order."""
    return [
        f"width = {cfg.group_m} * ct.cdiv(N, {cfg.tile_n})",
        f"first = (bid // width) * {cfg.group_m}",
        f"rows = min(ct.cdiv(M, {cfg.tile_m}) - first, {cfg.group_m})",
        "bm = first + bid % rows",
        "bn = (bid % width) // rows",
        f"acc = ct.full(({cfg.tile_m}, {cfg.tile_n}), 0, dtype=ct.float32)",
    ]


def _k_loop(spec: MatmulSpec, steps: str) -> list[str]:
    """The loop over K steps ``steps`` (a range's arguments) accumulating A x B tiles into ``acc``."""
    cfg = spec.config
    tm, tn, tk = cfg.tile_m, cfg.tile_n, cfg.tile_k
    loop = _load("a", spec.a, "bm", "kt", (tm, tk), cfg.latency) + _load("b", spec.b, "kt", "bn", (tk, tn), cfg.latency)
    if spec.mma != "native":
        loop += [f"{x} = ct.astype({x}, ct.float32)" for x, o in (("a", spec.a), ("b", spec.b)) if o.dtype != "float32"]
    if spec.mma == "tf32":
        loop += ["a = ct.astype(a, ct.tfloat32)", "b = ct.astype(b, ct.tfloat32)"]
    loop.append("acc = ct.mma(a, b, acc)")
    return [f"for kt in range({steps}):", *(f"    {line}" for line in loop)]


def _epilogue(spec: MatmulSpec, params: list[str]) -> list[str]:
    """Lines from the accumulator to the store of C: the product's rounding, each absorbed node, the last cast."""
    tm, tn = spec.config.tile_m, spec.config.tile_n
    body = [f"v = {_rounded('acc', spec.product_dtype)}"]
    for j, step in enumerate(spec.epilogue):
        if step.kind == "unary":
            expr, _ = FLOAT_MODES[step.mode](["v"], NodeSpec(step.mode, (0,), step.dtype, "float", step.params))
        else:
            assert step.operand is not None
            name = f"e{j}"
            params.append(f"{name}_array")
            if step.kind == "bias":
                body.append(
                    f"{name} = ct.load({name}_array, index=(bn,), shape=({tn},), padding_mode=ct.PaddingMode.ZERO)"
                )
                body.append(f"{name} = ct.reshape({name}, (1, {tn}))")
            else:
                body += _load(name, step.operand, "bm", "bn", (tm, tn), None)
            if step.operand.dtype != "float32":
                body.append(f"{name} = ct.astype({name}, ct.float32)")
            expr, _ = FLOAT_MODES[step.mode](["v", name], NodeSpec(step.mode, (0, 1), step.dtype, "float"))
        body.append(f"v = {_rounded(expr, step.dtype)}")
    body.append(f"v = ct.astype(v, {CT_DTYPES[spec.c.dtype]})")
    if spec.c.transposed:
        body.append("v = ct.transpose(v)")
    index = "(bn, bm)" if spec.c.transposed else "(bm, bn)"
    if spec.c.batched:
        shape = (1, tn, tm) if spec.c.transposed else (1, tm, tn)
        body.append(f"v = ct.reshape(v, {shape})")
        index = f"(z, {index[1:-1]})"
    body.append(f"ct.store(c_array, index={index}, tile=v)")
    return body


def _split_body(spec: MatmulSpec) -> list[str]:
    """Split-K's first kernel: block (bid, 0, s) multiplies the s-th slice of the K steps into partials[s]."""
    tm, tn, tk = spec.config.tile_m, spec.config.tile_n, spec.config.tile_k
    return [
        "s = ct.bid(2)",
        f"per = ct.cdiv(ct.cdiv(K, {tk}), ct.num_blocks(2))",
        *_tile_order(spec.config),
        *_k_loop(spec, f"s * per, min(s * per + per, ct.cdiv(K, {tk}))"),
        f"ct.store(p_array, index=(s, bm, bn), tile=ct.reshape(acc, (1, {tm}, {tn})))",
    ]


def _sum_body(spec: MatmulSpec, params: list[str]) -> list[str]:
    """Split-K's second kernel: a tile's partials added in split order, then the epilogue."""
    tm, tn = spec.config.tile_m, spec.config.tile_n
    load = f"ct.load(p_array, index=(s, bm, bn), shape=(1, {tm}, {tn}), padding_mode=ct.PaddingMode.ZERO)"
    return [
        *_tile_order(spec.config),
        "for s in range(p_array.shape[0]):",
        f"    acc = acc + ct.reshape({load}, ({tm}, {tn}))",
        *_epilogue(spec, params),
    ]


def generate(spec: MatmulSpec) -> str:
    """The module text (without the line that binds ``ct``) whose ``kernel`` computes ``spec``."""
    cfg = spec.config
    tm, tn, tk = cfg.tile_m, cfg.tile_n, cfg.tile_k
    k_extent = f"K = {_extent(spec.a, 1).format('a_array')}"
    c_extents = [f"M = {_extent(spec.c, 0).format('c_array')}", f"N = {_extent(spec.c, 1).format('c_array')}"]
    if spec.stage == "split":  # C's extents from the partials it writes instead of C
        params, head = ["a_array", "b_array", "p_array"], ["M = p_array.shape[1]", "N = p_array.shape[2]", k_extent]
        body = _split_body(spec)
    elif spec.stage == "sum":
        params, head = ["p_array", "c_array"], c_extents
        body = _sum_body(spec, params)
    else:
        params, head = ["a_array", "b_array", "c_array"], [*c_extents, k_extent]
        body = [*_tile_order(cfg), *_k_loop(spec, f"ct.cdiv(K, {tk})"), *_epilogue(spec, params)]
    head = ["z = ct.bid(1)", *head]
    if cfg.persistent:  # the loop lets cuTile's load warp fetch the next tile's operands during this one's epilogue
        head.append(f"for bid in range(ct.bid(0), ct.cdiv(M, {tm}) * ct.cdiv(N, {tn}), ct.num_blocks(0)):")
        body = [f"    {line}" for line in body]
    else:
        head.append("bid = ct.bid(0)")
    body = head + body
    hints = {"num_ctas": cfg.num_ctas, "occupancy": cfg.occupancy, "num_worker_warps": cfg.warps}
    decorator = ", ".join(f"{k}={v}" for k, v in hints.items() if v)
    unary = spec.stage != "split" and any(s.kind == "unary" for s in spec.epilogue)
    library = codegen.library() if unary else ""
    header = f"# {spec.name}: generated by sigdnn.plan_builders.cutile.matmul_codegen from\n# {spec!r}\n"
    lines = "\n".join(f"    {line}" for line in body)
    return (
        f"{header}{library}\n\n@ct.kernel{f'({decorator})' if decorator else ''}\n"
        f"def kernel({', '.join(params)}):\n{lines}\n"
    )
