"""resample_backward: resample's gradient, dy (y's dims) -> dx (x's dims), as cuDNN's resample backward.

The adjoint of resample with the same mode, coordinates and scales: each dy
element goes back to the inputs its y element was sampled from, with the
same weights (resample.py and math/resample.py give the conventions). dx's
dims are the caller's (``dims``): several input sizes resample to one output
size, so they cannot be inferred.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.resample import COORDINATES, MODES, check_sampling
from sigdnn.graph.ops.shapes import packed_in_order_of
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class ResampleBackward(Op):
    kind: ClassVar[str] = "resample_backward"
    table: ClassVar[str] = "ResampleBackwardAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("dy",)
    output_ports: ClassVar[tuple[str, ...]] = ("dx",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("mode", "enum"),
        ("coordinates", "enum"),
        ("dy", "uid"),
        ("dx", "uid"),
        ("dims", "i64[]"),
        ("scales", "f64[]"),
    )
    enums: ClassVar[dict[str, tuple[str, ...]]] = {"mode": MODES, "coordinates": COORDINATES}
    enum_types: ClassVar[dict[str, str]] = {"mode": "ResampleMode", "coordinates": "ResampleCoordinates"}
    key_attributes: ClassVar[tuple[str, ...]] = ("mode",)

    mode: str
    dy: int
    dx: int
    dims: tuple[int, ...]
    coordinates: str = "half_pixel"
    scales: tuple[float, ...] = ()

    sums_absolute_terms: ClassVar[bool] = True  # nonnegative weights: run on |dy| it gives sum(|terms|)

    def key_traits(self, tensors: Mapping[str, Tensor]) -> tuple[tuple[str, Any], ...]:
        return (*super().key_traits(tensors), ("spatial_rank", len(self.dims) - 2))

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """A dx element gathers the dy elements sampled from it: per spatial dim at most O // I + 2
        for nearest (spacing I / O, or 1 / scale with O = floor(I * scale)); linear's two taps and
        the half-pixel positions clamped to 0 (up to O / 2I more) stay within three times that."""
        taps = 1 if self.mode == "nearest" else 3
        sizes = zip(tensors["dx"].dims[2:], tensors["dy"].dims[2:])
        return math.prod(taps * (o // i + 2) for i, o in sizes)

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """One pass per spatial dim over the larger of the two tensors (the math shrinks first)."""
        dx, dy = tensors["dx"], tensors["dy"]
        return max(dx.size, dy.size) * 2 * (dx.rank - 2) + dx.size

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        dy = inputs["dy"]
        check_sampling(f"resample_backward[{self.mode}](dy='{dy.name}')", self, "dy", dy, "dx's [N, C, in...]")
        return {"dx": self.dims}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"resample_backward '{outputs['dx'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["dy"], dims)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        dy = graph.tensor("dy", (1, 2, 7, 3), layout="NHWC")
        graph.resample_backward(dy, "bilinear", (1, 2, 4, 5), name="resample_backward").set_output(True)
        return graph.nodes[-1]
