"""resample: nearest or (bi/tri)linear interpolation of x's spatial dims to y's dims.

cuDNN's resample has these modes but documents neither where samples fall
nor the weights; sigdnn uses torch.nn.functional.interpolate's conventions
(``coordinates``: half_pixel = align_corners=False, align_corners, asymmetric
= torch's legacy "nearest"). y's dims [N, C, out...] are the caller's (as
cuDNN's set_dim) or follow from ``scales`` (out = floor(S * scale), and the
samples are then placed by the scale, as torch does with scale_factor).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.shapes import check_choice, packed_in_order_of
from sigdnn.graph.ops.windows import spatial_rank
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node
    from sigdnn.graph.ops.resample_backward import ResampleBackward

MODES = ("nearest", "bilinear")
COORDINATES = ("half_pixel", "align_corners", "asymmetric")


def scaled_size(size: int, scale: float) -> int:
    """torch's output size for a scale factor: floor(size * scale)."""
    return math.floor(size * scale)


def check_sampling(where: str, op: Resample | ResampleBackward, port: str, given: Tensor, dims_are: str) -> None:
    """The rule resample and its backward share: mode, coordinates, and the caller's dims (y's for
    resample, dx's for the backward) against the port's tensor, whose N, C they keep; with scales,
    the output's spatial dims are floor(input's * scale)."""
    check_choice(where, "mode", op.mode, MODES)
    check_choice(where, "coordinates", op.coordinates, COORDINATES)
    if op.mode == "nearest" and op.coordinates == "align_corners":
        raise GraphError(f"{where}: nearest has no align_corners convention (use half_pixel or asymmetric)")
    s = spatial_rank(where, port, given)
    dims = op.dims
    if len(dims) != given.rank or tuple(dims[:2]) != given.dims[:2] or min(dims) < 1:
        raise GraphError(
            f"{where}: dims {list(dims)} must be {dims_are} with port '{port}''s N, C {list(given.dims[:2])}"
        )
    if op.scales:
        sizes, out = (given.dims[2:], dims[2:]) if port == "x" else (dims[2:], given.dims[2:])
        if len(op.scales) != s or any(not (0 < c < math.inf) for c in op.scales):
            raise GraphError(f"{where}: scales {list(op.scales)} must be {s} positive finite numbers")
        if any(d * c >= 2**62 for d, c in zip(sizes, op.scales)):
            raise GraphError(f"{where}: scales {list(op.scales)} make spatial dims past 2**62")
        want = [scaled_size(d, c) for d, c in zip(sizes, op.scales)]
        if list(out) != want:
            raise GraphError(
                f"{where}: dims {list(dims)} and port '{port}' {list(given.dims)} disagree with scales "
                f"{list(op.scales)} (spatial {want})"
            )


@attrs.frozen
class Resample(Op):
    kind: ClassVar[str] = "resample"
    table: ClassVar[str] = "ResampleAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x",)
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("mode", "enum"),
        ("coordinates", "enum"),
        ("x", "uid"),
        ("y", "uid"),
        ("dims", "i64[]"),
        ("scales", "f64[]"),
    )
    enums: ClassVar[dict[str, tuple[str, ...]]] = {"mode": MODES, "coordinates": COORDINATES}
    key_attributes: ClassVar[tuple[str, ...]] = ("mode",)

    mode: str
    x: int
    y: int
    dims: tuple[int, ...]
    coordinates: str = "half_pixel"
    scales: tuple[float, ...] = ()

    sums_absolute_terms: ClassVar[bool] = True  # nonnegative weights: run on |x| it gives sum(|terms|)

    def key_traits(self, tensors: Mapping[str, Tensor]) -> tuple[tuple[str, Any], ...]:
        return (*super().key_traits(tensors), ("spatial_rank", len(self.dims) - 2))

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """Linear modes blend two inputs per spatial dim."""
        return 1 if self.mode == "nearest" else 2 ** (tensors["x"].rank - 2)

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        return tensors["y"].size * 2 * (tensors["x"].rank - 2) + tensors["x"].size

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        where = f"resample[{self.mode}](x='{x.name}')"
        check_sampling(where, self, "x", x, "y's [N, C, out...]")
        return {"y": self.dims}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"resample '{outputs['y'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["x"], dims)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x = graph.tensor("x", (1, 2, 4, 5), layout="NHWC")
        graph.resample(x, "bilinear", (1, 2, 7, 3), name="resample").set_output(True)
        return graph.nodes[-1]
