"""The op methods of Graph, named and shaped as in the cuDNN frontend.

Each method documents its op's arguments and returns its output tensor(s);
the work is one call into ``Graph.add_node``, which every op shares.
Arrays and dims are logical (N, C, spatial...) whatever the memory layout.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from sigdnn.errors import GraphError
from sigdnn.graph.arguments import DTypeLike, integer, ints, real
from sigdnn.graph.frontend_arguments import (
    axis_list,
    rank_of,
    slice_bounds,
)
from sigdnn.graph.frontend_attention import AttentionFrontend
from sigdnn.graph.frontend_base import FrontendBase, Maybe
from sigdnn.graph.frontend_conv import ConvFrontend
from sigdnn.graph.frontend_linear_attention import LinearAttentionFrontend
from sigdnn.graph.frontend_norms import NormFrontend
from sigdnn.graph.frontend_windows import WindowFrontend
from sigdnn.graph.ops.concatenate import Concatenate
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.graph.ops.pointwise import MODES, PARAMS, Pointwise
from sigdnn.graph.ops.reduction import Reduction
from sigdnn.graph.ops.reshape import Reshape
from sigdnn.graph.ops.shapes import check_choice
from sigdnn.graph.ops.slice import Slice
from sigdnn.graph.ops.softmax import Softmax
from sigdnn.graph.ops.transpose import Transpose
from sigdnn.graph.tensor import Tensor

_ALIASES = {
    "relu": "relu_fwd",
    "tanh": "tanh_fwd",
    "sigmoid": "sigmoid_fwd",
    "gelu": "gelu_fwd",
    "elu": "elu_fwd",
    "swish": "swish_fwd",
    "softplus": "softplus_fwd",
}


class Frontend(ConvFrontend, NormFrontend, AttentionFrontend, WindowFrontend, LinearAttentionFrontend, FrontendBase):
    """Mixed into Graph: one method per op, each a documented call into ``add_node``."""

    __slots__ = ()

    def pointwise(
        self,
        mode: str,
        a: Tensor | float,
        b: Tensor | float | None = None,
        c: Tensor | float | None = None,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
        **params: float | int,
    ) -> Tensor:
        """One pointwise mode over up to three broadcast inputs (cuDNN's X, B, T).

        Modes (docs/ops.md has each formula): arithmetic ``add sub mul div
        add_square max min mod pow``; comparisons ``cmp_eq cmp_neq cmp_gt
        cmp_ge cmp_lt cmp_le``; logical ``logical_and logical_or
        logical_not``; math ``abs neg ceil floor sqrt rsqrt reciprocal exp
        log sin cos tan erf identity``; activations ``relu_fwd tanh_fwd
        sigmoid_fwd elu_fwd gelu_fwd gelu_approx_tanh_fwd softplus_fwd
        swish_fwd``; their gradients, inputs (dy, x): ``relu_bwd tanh_bwd
        sigmoid_bwd elu_bwd gelu_bwd gelu_approx_tanh_bwd softplus_bwd
        swish_bwd``; ``gen_index``; ``binary_select`` (a, b, mask: mask ?
        a : b).

        Parameters: ``relu_lower_clip``, ``relu_upper_clip``,
        ``relu_lower_clip_slope`` (relu), ``elu_alpha``, ``softplus_beta``,
        ``swish_beta``, ``axis`` (gen_index).
        """
        name = name or f"{mode}_{len(self.nodes)}"
        check_choice(f"node '{name}'", "pointwise mode", mode, tuple(MODES))
        unknown = set(params) - set(PARAMS)
        if unknown:
            raise GraphError(f"pointwise[{mode}]: unknown parameter(s) {sorted(unknown)}; known: {', '.join(PARAMS)}")
        typed: dict[str, Any] = {
            k: (integer(v, f"pointwise[{mode}] {k}") if k == "axis" else real(v, f"pointwise[{mode}] {k}"))
            for k, v in params.items()
            if v is not None
        }
        given = [t for t in (a, b, c) if t is not None]
        inputs = {
            port: self._operand(t, f"{name}_{port}", compute_dtype) for port, t in zip(("in_0", "in_1", "in_2"), given)
        }
        node = self.add_node(Pointwise, inputs, {"mode": mode, **typed}, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def _operand(self, value: Tensor | float, name: str, compute_dtype: DTypeLike) -> Tensor:
        """A pointwise input: a tensor as given, a plain number as a pass-by-value scalar of the compute dtype
        (as cuDNN-frontend turns ``mul(x, 0.5)``'s number into one)."""
        if isinstance(value, numbers.Number):
            return self.scalar(name, value, compute_dtype)
        return value

    def matmul(self, a: Tensor, b: Tensor, *, name: str | None = None, compute_dtype: DTypeLike = None) -> Tensor:
        """c = a @ b over the last two dims, batched over leading dims that broadcast."""
        return self._single(self.add_node(Matmul, {"a": a, "b": b}, name=name, compute_dtype=compute_dtype))

    def softmax(
        self,
        x: Tensor,
        axes: Sequence[int] | int | None = None,
        log: bool = False,
        generate_stats: bool = False,
        *,
        seq_len_q: Maybe = None,
        seq_len_kv: Maybe = None,
        ragged_offsets: Mapping[str, Tensor] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> tuple[Tensor, Maybe]:
        """Softmax (log-softmax with ``log``) over ``axes`` (default: the last) -> (y, stats).

        stats = max + log(sum(exp(x - max))), x's dims with a 1 at each
        softmax axis, float32 unless set; None unless ``generate_stats``.
        """
        where = f"node '{name or 'softmax'}'"
        rank = rank_of(x)
        attributes = {
            "axes": axis_list(where, (rank - 1,) if axes is None else axes, rank),
            "log": bool(log),
            "generate_stats": bool(generate_stats),
        }
        node = self.add_node(Softmax, {"x": x}, attributes, name=name, compute_dtype=compute_dtype)
        return self.outputs_of(node)  # type: ignore[return-value]

    def reduction(
        self,
        x: Tensor,
        mode: str,
        dims: Sequence[int] | None = None,
        *,
        axes: Sequence[int] | int | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Reduce x by ``mode`` (add mul min max amax avg norm1 norm2 mul_no_zeros).

        As cuDNN, the reduced axes are those where the output's ``dims``
        are 1 (every other dim must be x's); or give ``axes`` instead.
        """
        where = f"node '{name or 'reduction'}'"
        x_dims = x.dims if isinstance(x, Tensor) else ()
        if (dims is None) == (axes is None):
            raise GraphError(f"{where}: give the output's dims or the reduced axes, one of them")
        if dims is not None:
            y_dims = ints(dims, f"{where} dims")
            if len(y_dims) != len(x_dims) or any(e not in (1, d) for e, d in zip(y_dims, x_dims)):
                raise GraphError(
                    f"{where}: dims {list(y_dims)} are no reduction of port 'x' {list(x_dims)}: each must be 1 or x's"
                )
            reduced = tuple(i for i, (e, d) in enumerate(zip(y_dims, x_dims)) if e == 1 and d != 1)
        else:
            reduced = axis_list(where, axes, len(x_dims))  # type: ignore[arg-type]
        attributes = {"mode": mode, "axes": reduced}
        return self._single(self.add_node(Reduction, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def reshape(
        self, x: Tensor, dims: Sequence[int], *, name: str | None = None, compute_dtype: DTypeLike = None
    ) -> Tensor:
        """x's elements in logical row-major order under ``dims`` (what cuDNN sets on the output)."""
        attributes = {"dims": ints(dims, f"node '{name or 'reshape'}' dims")}
        return self._single(self.add_node(Reshape, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def transpose(
        self, x: Tensor, permutation: Sequence[int], *, name: str | None = None, compute_dtype: DTypeLike = None
    ) -> Tensor:
        """Output axis i is x's axis ``permutation[i]``."""
        attributes = {"permutation": ints(permutation, f"node '{name or 'transpose'}' permutation")}
        return self._single(self.add_node(Transpose, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def slice(
        self, x: Tensor, slices: Sequence[slice], *, name: str | None = None, compute_dtype: DTypeLike = None
    ) -> Tensor:
        """x[slices]: one Python slice per leading axis (``[slice(0, 2), slice(1, 8, 2)]``), normalized as
        Python does; the rank is kept, and an empty result is an error."""
        attributes = slice_bounds(f"node '{name or 'slice'}'", x, slices)
        return self._single(self.add_node(Slice, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def concatenate(
        self,
        inputs: Sequence[Tensor],
        axis: int,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Join ``inputs`` along ``axis`` (negative counts from the end); other dims must match."""
        where = f"node '{name or 'concatenate'}'"
        first = inputs[0] if isinstance(inputs, Sequence) and inputs else None
        a = integer(axis, f"{where} axis")
        if a < 0:
            a += rank_of(first)
        node = self.add_node(Concatenate, {"x": inputs}, {"axis": a}, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def __getattr__(self, mode: str) -> Any:
        """Per-mode conveniences: ``g.add(a, b)``, ``g.relu_fwd(x)``, ``g.relu(x)``."""
        alias = _ALIASES.get(mode, mode)
        if alias in MODES:
            return lambda *args, **kw: self.pointwise(alias, *args, **kw)
        raise AttributeError(mode)
