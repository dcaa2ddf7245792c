"""The convolution methods of Graph's frontend (fprop, dgrad, wgrad), mixed into Frontend."""

from __future__ import annotations

from collections.abc import Sequence

from sigdnn.graph.arguments import DTypeLike, ints
from sigdnn.graph.frontend_arguments import (
    conv_arguments,
    rank_of,
)
from sigdnn.graph.frontend_base import FrontendBase
from sigdnn.graph.ops.conv_dgrad import ConvDgrad
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.conv_wgrad import ConvWgrad
from sigdnn.graph.tensor import Tensor


class ConvFrontend(FrontendBase):
    """Convolution: forward, data gradient, weight gradient."""

    __slots__ = ()

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

    def conv_dgrad(
        self,
        dy: Tensor,
        w: Tensor,
        padding: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        dilation: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        dims: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Data gradient of conv_fprop: dy [N, K, *out], w [K, C/groups, *R] -> dx [N, C, *S].

        dx's dims are inferred for an ungrouped convolution with every
        stride 1; otherwise give them (``dims``, what cuDNN sets with
        set_dim on the output). They are checked to produce dy.
        """
        where = f"node '{name or 'conv_dgrad'}'"
        arguments = conv_arguments(where, max(rank_of(dy) - 2, 0), padding, pre_padding, post_padding, stride, dilation)
        arguments["dims"] = ints(dims or (), f"{where} dims")
        node = self.add_node(ConvDgrad, {"dy": dy, "w": w}, arguments, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def conv_wgrad(
        self,
        x: Tensor,
        dy: Tensor,
        padding: Sequence[int] | None = None,
        stride: Sequence[int] | None = None,
        dilation: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        dims: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Weight gradient of conv_fprop: x [N, C, *S], dy [N, K, *out] -> dw [K, C/groups, *R].

        dw's dims are inferred for an ungrouped convolution with every
        stride 1; otherwise give them (``dims``). They are checked to produce dy.
        """
        where = f"node '{name or 'conv_wgrad'}'"
        arguments = conv_arguments(where, max(rank_of(x) - 2, 0), padding, pre_padding, post_padding, stride, dilation)
        arguments["dims"] = ints(dims or (), f"{where} dims")
        node = self.add_node(ConvWgrad, {"x": x, "dy": dy}, arguments, name=name, compute_dtype=compute_dtype)
        return self._single(node)
