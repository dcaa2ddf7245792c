"""Recipes: one small graph per generated case, from (op, mode, dtype, shape, layout, attributes).

A recipe knows how an op's inputs relate to the swept shape (pointwise: every
input has it; reduction / softmax: x has it; matmul: the shape is
[batch..., M, K, N]; gdn / kda: [H, K, V, L_1, ..., L_n], sequences of those lengths; sdpa: [Hq, Hkv, D, L_1,
..., L_n], token-packed sequences of those lengths; conv_fprop / conv_dgrad / conv_wgrad: the forward
convolution's [N, C, K, R, S_1, ..., S_n], an R^n filter over n spatial dims, attributes stride, padding,
dilation and groups alike on every dim; layernorm / rmsnorm / batchnorm: x's dims, normalized over the last
dim (batchnorm: per channel, dim 1), attributes phase and epsilon). The shrinker rebuilds a case from its recipe with a
smaller shape, so a recipe is a pure function of its arguments.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np

from sigdnn.errors import GraphError
from sigdnn.graph.graph import Graph
from sigdnn.graph.ops.pointwise import MODES
from sigdnn.graph.ops.ragged import token_major
from sigdnn.graph.ops.reduction import Reduction


@attrs.frozen
class GraphRecipe:
    """Everything a generated case's graph is made from (JSON-friendly, so results can name it)."""

    op: str
    mode: str | None
    dtype: str
    shape: tuple[int, ...]
    layout: str
    attributes: tuple[tuple[str, Any], ...] = ()
    compute_dtype: str | None = None

    def with_shape(self, shape: tuple[int, ...]) -> GraphRecipe:
        return attrs.evolve(self, shape=tuple(shape))

    def build(self) -> Graph:
        return RECIPES[self.op].build(self)

    def label(self) -> str:
        mode = f"[{self.mode}]" if self.mode else ""
        extra = "".join(f" {k}={v}" for k, v in self.attributes)
        compute = f" compute={self.compute_dtype}" if self.compute_dtype else ""  # cases may differ by it alone
        return f"{self.op}{mode} {self.dtype} {list(self.shape)} {self.layout}{extra}{compute}"


@attrs.frozen
class Recipe:
    modes: tuple[str, ...]  # every mode the op takes (empty: no mode)
    build: Callable[[GraphRecipe], Graph]
    accepts: Callable[[str | None, str], bool] = lambda mode, attribute: True  # attribute applies to mode


def _graph(r: GraphRecipe) -> Graph:
    name = "_".join(str(p) for p in (r.op, r.mode, r.dtype, "x".join(map(str, r.shape)), r.layout) if p)
    return Graph(name, io_dtype=r.dtype, compute_dtype=r.compute_dtype or "float32")


def _input(g: Graph, name: str, r: GraphRecipe, dims: tuple[int, ...], dtype: str | None = None) -> Any:
    layout = None if r.layout == "packed" else r.layout
    return g.tensor(name, dims=dims, layout=layout, dtype=dtype)


def _pointwise(r: GraphRecipe) -> Graph:
    g = _graph(r)
    arity = MODES[r.mode].arity
    ins = [
        _input(g, f"in_{i}", r, r.shape, "bool" if (r.mode, i) == ("binary_select", 2) else None) for i in range(arity)
    ]
    g.pointwise(r.mode, *ins, **dict(r.attributes)).set_output(True).set_name("out")
    return g


def _reduction(r: GraphRecipe) -> Graph:
    g = _graph(r)
    attributes = dict(r.attributes)
    axes = attributes.pop("axes", len(r.shape) - 1)
    g.reduction(_input(g, "x", r, r.shape), r.mode, axes=axes, **attributes).set_output(True).set_name("y")
    return g


def _softmax(r: GraphRecipe) -> Graph:
    g = _graph(r)
    y, _ = g.softmax(_input(g, "x", r, r.shape), **dict(r.attributes))
    y.set_output(True).set_name("y")
    return g


def _matmul(r: GraphRecipe) -> Graph:
    g = _graph(r)
    *batch, m, k, n = r.shape
    a = _input(g, "a", r, (*batch, m, k))
    b = _input(g, "b", r, (*batch, k, n))
    g.matmul(a, b, **dict(r.attributes)).set_output(True).set_name("c")
    return g


def _delta_rule(r: GraphRecipe) -> Graph:
    """shape = [H, K, V, L_1, ..., L_n]: n sequences of those lengths, packed; cu_seqlens a constant."""
    g = _graph(r)
    heads, kd, vd, *lengths = r.shape
    tokens = sum(lengths)
    q, k = _input(g, "q", r, (tokens, heads, kd)), _input(g, "k", r, (tokens, heads, kd))
    v, beta = _input(g, "v", r, (tokens, heads, vd)), _input(g, "beta", r, (tokens, heads))
    gate = _input(g, "g", r, (tokens, heads, kd) if r.op == "kda" else (tokens, heads), "float32")
    cu = g.constant("cu_seqlens", np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    o, final = getattr(g, r.op)(q, k, v, gate, beta, cu, output_final_state=True, **dict(r.attributes))
    o.set_output(True).set_name("o")
    final.set_output(True).set_name("final_state")
    return g


def _sdpa(r: GraphRecipe) -> Graph:
    """shape = [Hq, Hkv, D, L_1, ..., L_n]: n sequences of those lengths, q / k / v / o token-packed (ragged
    offsets, as flash-attention's varlen call packs them); lengths and offsets constants. Attributes: causal."""
    g = _graph(r)
    hq, hkv, width, *lengths = r.shape
    batch, longest = len(lengths), max(lengths)
    shapes = {"q": (batch, hq, longest, width), "k": (batch, hkv, longest, width), "v": (batch, hkv, longest, width)}
    q, k, v = (g.tensor(n, dims=d, strides=token_major(d)) for n, d in shapes.items())
    seq_len = g.constant("seq_len", np.asarray(lengths, np.int32))
    starts = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    offsets = {
        p: g.constant(f"{p}_offsets", starts * h * width) for p, h in (("q", hq), ("k", hkv), ("v", hkv), ("o", hq))
    }
    o, _ = g.sdpa(q, k, v, width**-0.5, None, bool(dict(r.attributes).get("causal", False)), name="sdpa",
                  seq_len_q=seq_len, seq_len_kv=seq_len, ragged_offsets=offsets)  # fmt: skip
    o.set_output(True).set_name("o")
    return g


def _conv(r: GraphRecipe) -> Graph:
    """The forward convolution of shape [N, C, K, R, S_1, ..., S_n]: fprop, or the gradient of one of its operands
    (dy, x and w made with the forward's dims, dx / dw's given)."""
    g = _graph(r)
    if len(r.shape) < 5:
        raise GraphError(f"{r.op} recipe: shape {list(r.shape)} is not [N, C, K, R, S_1, ..., S_n]")
    n, c, k, size, *spatial = r.shape
    attributes = dict(r.attributes)
    groups = int(attributes.pop("groups", 1))
    if c % groups or k % groups:
        raise GraphError(f"{r.op} recipe: {groups} groups do not divide C {c} and K {k}")
    stride, padding, dilation = (int(attributes.pop(a, d)) for a, d in (("stride", 1), ("padding", 0), ("dilation", 1)))
    rank = len(spatial)
    geometry = {"padding": (padding,) * rank, "stride": (stride,) * rank, "dilation": (dilation,) * rank}
    out = [(s + 2 * padding - dilation * (size - 1) - 1) // stride + 1 for s in spatial]
    if min(out) < 1:
        raise GraphError(f"{r.op} recipe: a {size}-wide filter leaves no output of spatial dims {spatial}")
    x_dims, w_dims, y_dims = (n, c, *spatial), (k, c // groups, *(size,) * rank), (n, k, *out)
    if r.op == "conv_fprop":
        y = g.conv_fprop(_input(g, "x", r, x_dims), _input(g, "w", r, w_dims), **geometry, **attributes, name="conv")
    elif r.op == "conv_dgrad":
        dy, w = _input(g, "dy", r, y_dims), _input(g, "w", r, w_dims)
        y = g.conv_dgrad(dy, w, **geometry, dims=x_dims, **attributes, name="conv")
    else:
        dy, x = _input(g, "dy", r, y_dims), _input(g, "x", r, x_dims)
        y = g.conv_wgrad(x, dy, **geometry, dims=w_dims, **attributes, name="conv")
    y.set_output(True).set_name("y")
    return g


def _norm(r: GraphRecipe) -> Graph:
    """Normalization of x (shape): layernorm / rmsnorm over the last dim, batchnorm per channel (dim 1); scale
    and bias float32; attributes phase ("training" or "inference", layernorm / rmsnorm) and epsilon."""
    if len(r.shape) < 2:
        raise GraphError(f"{r.op} recipe: shape {list(r.shape)} has no batch dim")
    g = _graph(r)
    attributes = dict(r.attributes)
    x = _input(g, "x", r, r.shape)
    axis = 1 if r.op == "batchnorm" else len(r.shape) - 1
    stats = tuple(d if a == axis else 1 for a, d in enumerate(r.shape))
    scale, bias = (g.tensor(name, dims=stats, dtype="float32") for name in ("scale", "bias"))
    if r.op == "batchnorm":
        y = g.batchnorm(x, scale, bias, **attributes, name="norm")[0]
    else:
        phase = attributes.pop("phase", "training")
        y = getattr(g, r.op)(phase, x, scale, bias, **attributes, name="norm")[0]
    y.set_output(True).set_name("y")
    return g


def _takes(mode: str | None, attribute: str) -> bool:
    """A pointwise parameter applies only to the modes that read it (so a sweep does not multiply the others)."""
    return attribute in MODES[mode].params


RECIPES: Mapping[str, Recipe] = {
    "pointwise": Recipe(tuple(MODES), _pointwise, _takes),
    "reduction": Recipe(tuple(Reduction.enums["mode"]), _reduction),
    "softmax": Recipe((), _softmax),
    "matmul": Recipe((), _matmul),
    "gdn": Recipe((), _delta_rule),
    "kda": Recipe((), _delta_rule),
    "sdpa": Recipe((), _sdpa),
    "conv_fprop": Recipe((), _conv),
    "conv_dgrad": Recipe((), _conv),
    "conv_wgrad": Recipe((), _conv),
    "layernorm": Recipe((), _norm),
    "rmsnorm": Recipe((), _norm),
    "batchnorm": Recipe((), _norm),
}
