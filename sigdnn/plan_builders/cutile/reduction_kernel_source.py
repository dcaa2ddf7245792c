"""Reduction kernels as cuTile source: any mode over any set of axes, for any strides (gathers).

A block takes TK kept outputs and walks the reduced elements in chunks of
TR, gathering a (TK, TR) tile whose offsets come from the kept and reduced
indices over their (merged) dims; per-lane accumulators combine chunk by
chunk and reduce once at the end. Masked lanes hold the combine's identity.
When there are few outputs the reduced range is split over blocks
(grid (K tiles, splits)), each storing a float32 partial to the workspace,
and the same kernel, built over the partials, combines and finishes them.

Modes (docs/ops.md): a transform (x, |x|, x^2, or x with 0 read as 1), a
combine (add, mul, max, min; max and min propagate NaN), a finish (none,
divide by the count, square root).
"""

from __future__ import annotations

import attrs

from sigdnn.plan_builders.cutile.row_kernel_source import _lit, _module

# mode -> (transform, combine, finish)
MODES = {
    "add": ("x", "add", None),
    "mul": ("x", "mul", None),
    "min": ("x", "min", None),
    "max": ("x", "max", None),
    "amax": ("abs", "max", None),
    "avg": ("x", "add", "avg"),
    "norm1": ("abs", "add", None),
    "norm2": ("square", "add", "sqrt"),
    "mul_no_zeros": ("nonzero", "mul", None),
}
INF_BITS = 0x7F800000


@attrs.frozen
class ReduceSpec:
    kept: tuple[int, ...]  # merged kept dims, outermost first
    kept_x: tuple[int, ...]  # their strides in x
    kept_y: tuple[int, ...]  # their strides in y (unused when ``partial``)
    reduced: tuple[int, ...]  # merged reduced dims
    reduced_x: tuple[int, ...]
    count: int  # reduced elements per output
    tile: tuple[int, int]  # (TK, TR)
    per: int  # reduced chunks per split
    transform: str
    combine: str
    finish: str | None
    partial: bool  # store float32 partials (splits, K) instead of finished outputs
    total: int  # the node's reduced elements per output (what avg divides by; ``count`` when not split)


def _offset(index: str, dims: tuple[int, ...], strides: tuple[int, ...]) -> str:
    """The memory offset of a flat (row-major over ``dims``) index."""
    terms = []
    inner = 1
    for d, s in reversed(list(zip(dims, strides, strict=True))):
        coord = f"({index} // {inner})" if inner > 1 else index
        if inner * d < max(1, _size(dims)):
            coord = f"({coord} % {d})"
        terms.append(f"{coord} * {s}" if s != 1 else coord)
        inner *= d
    return " + ".join(reversed(terms)) if terms else f"{index} * 0"


def _size(dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def _identity(combine: str, shape: tuple[int, int]) -> str:
    if combine == "add":
        return f"ct.full({shape}, 0.0, dtype=ct.float32)"
    if combine == "mul":
        return f"ct.full({shape}, 1.0, dtype=ct.float32)"
    inf = f"ct.bitcast(ct.full({shape}, {INF_BITS}, dtype=ct.int32), ct.float32)"
    return inf if combine == "min" else f"-{inf}"


def generate(spec: ReduceSpec) -> str:
    tk, tr = spec.tile
    kept = _size(spec.kept)
    body = [
        "kb = ct.bid(0)",
        "sp = ct.bid(1)",
        f"k = kb * {tk} + ct.arange({tk}, dtype=ct.int32)",
        f"kin = k < {kept}",
        f"kx = ct.reshape({_offset('k', spec.kept, spec.kept_x)}, ({tk}, 1))",
        f"ident = {_identity(spec.combine, (tk, tr))}",
        "acc = ident",
        f"for i in range({spec.per}):",
        f"    r = (sp * {spec.per} + i) * {tr} + ct.arange({tr}, dtype=ct.int32)",
        f"    inside = ct.reshape(kin, ({tk}, 1)) & ct.reshape(r < {spec.count}, (1, {tr}))",
        f"    offsets = kx + ct.reshape({_offset('r', spec.reduced, spec.reduced_x)}, (1, {tr}))",
        "    v = ct.astype(ct.gather(x, offsets, mask=inside), ct.float32)",
    ]
    transform = {"x": "v", "abs": "ct.abs(v)", "square": "v * v", "nonzero": "ct.where(v == 0.0, 1.0, v)"}
    body.append(f"    v = ct.where(inside, {transform[spec.transform]}, ident)")
    combine = {
        "add": "acc + v",
        "mul": "acc * v",
        "max": "ct.maximum(acc, v, propagate_nan=True)",
        "min": "ct.minimum(acc, v, propagate_nan=True)",
    }
    body.append(f"    acc = {combine[spec.combine]}")
    reduce = {"add": "ct.sum", "mul": "ct.prod", "max": "ct.max", "min": "ct.min"}[spec.combine]
    nan = ", propagate_nan=True" if spec.combine in ("max", "min") else ""
    body.append(f"out = {reduce}(acc, axis=1{nan})")
    if spec.finish == "avg":
        body.append(f"out = out / {_lit(spec.total)}")
    elif spec.finish == "sqrt":
        body.append("out = ct.sqrt(out)")
    if spec.partial:
        body.append(f"ct.store(y, index=(sp, kb), tile=ct.reshape(out, (1, {tk})))")
    else:
        body.append(f"ct.scatter(y, {_offset('k', spec.kept, spec.kept_y)}, ct.astype(out, y.dtype), mask=kin)")
    return _module(["x", "y"], body)
