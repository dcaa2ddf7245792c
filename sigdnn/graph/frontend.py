"""The op methods of Graph, named and shaped as in the cuDNN frontend.

Each method documents its op's arguments and returns its output tensor(s);
the work is one call into ``Graph.add_node``, which every op shares.
Arrays and dims are logical (N, C, spatial...) whatever the memory layout.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from sigdnn.errors import GraphError
from sigdnn.graph.arguments import DTypeLike, integer, ints, real
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.graph.ops.pointwise import MODES, PARAMS, Pointwise

if TYPE_CHECKING:
    from sigdnn.graph.node import Node
    from sigdnn.graph.ops.base import Op
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


def conv_arguments(
    where: str,
    spatial: int,
    padding: Sequence[int] | None,
    pre_padding: Sequence[int] | None,
    post_padding: Sequence[int] | None,
    stride: Sequence[int] | None,
    dilation: Sequence[int] | None,
) -> dict[str, tuple[int, ...]]:
    """cuDNN's convolution arguments: ``padding`` or (``pre_padding``, ``post_padding``), stride, dilation."""
    if padding is not None and (pre_padding is not None or post_padding is not None):
        raise GraphError(f"{where}: give padding or pre_padding/post_padding, not both")
    zeros, ones = (0,) * spatial, (1,) * spatial
    return {
        "pre_padding": ints(padding if padding is not None else pre_padding or zeros, f"{where} padding"),
        "post_padding": ints(padding if padding is not None else post_padding or zeros, f"{where} padding"),
        "stride": ints(stride or ones, f"{where} stride"),
        "dilation": ints(dilation or ones, f"{where} dilation"),
    }


class Frontend:
    """Mixed into Graph: one method per op, each a documented call into ``add_node``."""

    __slots__ = ()

    if TYPE_CHECKING:

        def add_node(
            self,
            op_class: type[Op],
            inputs: Mapping[str, Tensor | None],
            attributes: Mapping[str, Any] | None = None,
            *,
            name: str | None = None,
            compute_dtype: DTypeLike = None,
        ) -> Node: ...

        def outputs_of(self, node: Node, ports: Sequence[str] | None = None) -> tuple[Tensor | None, ...]: ...

        nodes: list[Node]
        tensors: dict[int, Tensor]

    def _single(self, node: Node) -> Tensor:
        (out,) = self.outputs_of(node)
        assert out is not None
        return out

    def pointwise(
        self,
        mode: str,
        a: Tensor,
        b: Tensor | None = None,
        c: Tensor | None = None,
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
        **params: float | int,
    ) -> Tensor:
        """One pointwise mode over up to three broadcast inputs (cuDNN's X, B, T).

        Modes (OPS.md has each formula): arithmetic ``add sub mul div
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
        if mode not in MODES:
            raise GraphError(f"unknown pointwise mode '{mode}'; known: {', '.join(MODES)}")
        unknown = set(params) - set(PARAMS)
        if unknown:
            raise GraphError(f"pointwise[{mode}]: unknown parameter(s) {sorted(unknown)}; known: {', '.join(PARAMS)}")
        typed: dict[str, Any] = {
            k: (integer(v, f"pointwise[{mode}] {k}") if k == "axis" else real(v, f"pointwise[{mode}] {k}"))
            for k, v in params.items()
            if v is not None
        }
        given = [t for t in (a, b, c) if t is not None]
        inputs = dict(zip(("in_0", "in_1", "in_2"), given))
        node = self.add_node(
            Pointwise,
            inputs,
            {"mode": mode, **typed},
            name=name or f"{mode}_{len(self.nodes)}",
            compute_dtype=compute_dtype,
        )
        return self._single(node)

    def matmul(self, a: Tensor, b: Tensor, *, name: str | None = None, compute_dtype: DTypeLike = None) -> Tensor:
        """c = a @ b over the last two dims, batched over leading dims that broadcast."""
        return self._single(self.add_node(Matmul, {"a": a, "b": b}, name=name, compute_dtype=compute_dtype))

    def conv_fprop(
        self,
        x: Tensor,
        w: Tensor,
        padding: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        dilation: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Forward convolution (cross-correlation): x [N, C, *S], w [K, C/groups, *R] -> y [N, K, *out]."""
        spatial = max(len(x.dims) - 2, 0)
        where = f"node '{name or 'conv_fprop'}'"
        arguments = conv_arguments(where, spatial, padding, pre_padding, post_padding, stride, dilation)
        return self._single(
            self.add_node(ConvFprop, {"x": x, "w": w}, arguments, name=name, compute_dtype=compute_dtype)
        )

    def __getattr__(self, mode: str) -> Any:
        """Per-mode conveniences: ``g.add(a, b)``, ``g.relu_fwd(x)``, ``g.relu(x)``."""
        alias = _ALIASES.get(mode, mode)
        if alias in MODES:
            return lambda *args, **kw: self.pointwise(alias, *args, **kw)
        raise AttributeError(mode)
