"""The window methods of Graph's frontend (pooling, resample and their backward), mixed into Frontend."""

from __future__ import annotations

from collections.abc import Sequence

from sigdnn.errors import GraphError
from sigdnn.graph.arguments import DTypeLike, ints, real
from sigdnn.graph.frontend_arguments import (
    rank_of,
    window_arguments,
)
from sigdnn.graph.frontend_base import FrontendBase
from sigdnn.graph.ops.pooling import Pooling
from sigdnn.graph.ops.pooling_backward import PoolingBackward
from sigdnn.graph.ops.resample import Resample, scaled_size
from sigdnn.graph.ops.resample_backward import ResampleBackward
from sigdnn.graph.tensor import Tensor


class WindowFrontend(FrontendBase):
    """Pooling and resample and their backward passes."""

    __slots__ = ()

    def pooling(
        self,
        x: Tensor,
        mode: str,
        window: Sequence[int],
        stride: Sequence[int] | None = None,
        padding: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Pool x [N, C, *S] -> y [N, C, *out]: mode "max", "average_count_include_pad" or "average_count_exclude_pad".

        stride defaults to the window; padding as in conv_fprop, each below the window.
        """
        where = f"node '{name or 'pooling'}'"
        spatial = max(rank_of(x) - 2, 0)
        arguments = window_arguments(where, spatial, window, stride, padding, pre_padding, post_padding)
        node = self.add_node(Pooling, {"x": x}, {"mode": mode, **arguments}, name=name, compute_dtype=compute_dtype)
        return self._single(node)

    def pooling_backward(
        self,
        dy: Tensor,
        x: Tensor,
        mode: str,
        window: Sequence[int],
        stride: Sequence[int] | None = None,
        padding: Sequence[int] | None = None,
        *,
        pre_padding: Sequence[int] | None = None,
        post_padding: Sequence[int] | None = None,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Gradient of pooling with the same mode and window: dy (pooled dims of x), x -> dx."""
        where = f"node '{name or 'pooling_backward'}'"
        spatial = max(rank_of(x) - 2, 0)
        arguments = window_arguments(where, spatial, window, stride, padding, pre_padding, post_padding)
        inputs = {"dy": dy, "x": x}
        node = self.add_node(
            PoolingBackward, inputs, {"mode": mode, **arguments}, name=name, compute_dtype=compute_dtype
        )
        return self._single(node)

    def resample(
        self,
        x: Tensor,
        mode: str,
        dims: Sequence[int] | None = None,
        scales: Sequence[float] | None = None,
        coordinates: str = "half_pixel",
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Resample x [N, C, *S] -> y [N, C, *out] by "nearest" or "bilinear" (linear per spatial dim).

        Give y's ``dims`` (as cuDNN's set_dim) or ``scales`` (out = floor(S *
        scale), samples placed by the scale as torch's scale_factor).
        ``coordinates``: "half_pixel" (torch's align_corners=False; nearest:
        "nearest-exact"), "align_corners" (linear only) or "asymmetric"
        (torch's legacy "nearest").
        """
        where = f"node '{name or 'resample'}'"
        factors = tuple(real(c, f"{where} scales", finite=True) for c in scales) if scales is not None else ()
        if dims is None:
            if not factors:
                raise GraphError(f"{where}: give y's dims or the scales")
            x_dims = x.dims if isinstance(x, Tensor) else ()
            dims = (*x_dims[:2], *(scaled_size(d, c) for d, c in zip(x_dims[2:], factors)))
        attributes = {"mode": mode, "coordinates": coordinates, "dims": ints(dims, f"{where} dims"), "scales": factors}
        return self._single(self.add_node(Resample, {"x": x}, attributes, name=name, compute_dtype=compute_dtype))

    def resample_backward(
        self,
        dy: Tensor,
        mode: str,
        dims: Sequence[int],
        scales: Sequence[float] | None = None,
        coordinates: str = "half_pixel",
        *,
        name: str | None = None,
        compute_dtype: DTypeLike = None,
    ) -> Tensor:
        """Gradient of resample with the same mode, coordinates and scales: dy [N, C, *out] -> dx.

        ``dims`` are dx's [N, C, *S] (x's dims; as cuDNN's set_dim on dx):
        several input sizes resample to one output size. With ``scales``,
        dy's spatial dims must be floor(S * scale).
        """
        where = f"node '{name or 'resample_backward'}'"
        factors = tuple(real(c, f"{where} scales", finite=True) for c in scales) if scales is not None else ()
        attributes = {"mode": mode, "coordinates": coordinates, "dims": ints(dims, f"{where} dims"), "scales": factors}
        node = self.add_node(ResampleBackward, {"dy": dy}, attributes, name=name, compute_dtype=compute_dtype)
        return self._single(node)
