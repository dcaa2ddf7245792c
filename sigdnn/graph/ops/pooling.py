"""pooling: max or average over windows of x's spatial dims (cuDNN's resample pooling modes; docs/ops.md).

x is [N, C, spatial...] (1 to 3 spatial dims), y is [N, C, out...] with
out = floor((S + pre + post - window) / stride) + 1 per dim. Padding never
wins a max; ``average_count_include_pad`` divides by the window size,
``average_count_exclude_pad`` by the real elements in the window. Each
padding must stay below the window, so every window holds a real element.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.limits import Limits
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.ops.shapes import check_choice, packed_in_order_of
from sigdnn.graph.ops.windows import check_lengths, check_taps, padded_bytes, spatial_rank, window_outputs
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node

MODES = ("max", "average_count_include_pad", "average_count_exclude_pad")


@attrs.frozen
class Window:
    """A pooling window sweep, checked against an input's spatial dims."""

    window: tuple[int, ...]
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]

    def outputs(self, where: str, mode: str, x_port: str, x: Tensor) -> tuple[int, ...]:
        """The pooled dims [N, C, out...] of x; GraphError naming the attribute that does not fit."""
        check_choice(where, "mode", mode, MODES)
        s = spatial_rank(where, x_port, x)
        check_lengths(where, s, attrs.asdict(self))
        if min(self.window) < 1 or min(self.stride) < 1:
            raise GraphError(f"{where}: window {list(self.window)} and stride {list(self.stride)} must be >= 1")
        if min(self.pre_padding) < 0 or min(self.post_padding) < 0:
            raise GraphError(
                f"{where}: padding must be >= 0, got pre {list(self.pre_padding)} post {list(self.post_padding)}"
            )
        for i, (r, a, b) in enumerate(zip(self.window, self.pre_padding, self.post_padding)):
            if a >= r or b >= r:
                raise GraphError(
                    f"{where}: spatial dim {i}: padding ({a}, {b}) must be smaller than the window {r}, "
                    "so that no window is padding only"
                )
        ones = (1,) * s
        out = window_outputs(where, x.dims[2:], self.window, self.pre_padding, self.post_padding, self.stride, ones)
        return (*x.dims[:2], *out)

    def scratch_bytes(self, x: Tensor, limits: Limits) -> int:
        """A padded float64 copy of x, and a bound on the window's taps (each one pass over the output)."""
        check_taps("pooling window", self.window, limits)
        return padded_bytes(x.dims, self.pre_padding, self.post_padding)


def window_of(op: Any) -> Window:
    return Window(op.window, op.pre_padding, op.post_padding, op.stride)


@attrs.frozen
class Pooling(Op):
    kind: ClassVar[str] = "pooling"
    table: ClassVar[str] = "PoolingAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x",)
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("mode", "enum"),
        ("x", "uid"),
        ("y", "uid"),
        ("window", "i64[]"),
        ("pre_padding", "i64[]"),
        ("post_padding", "i64[]"),
        ("stride", "i64[]"),
    )
    enums: ClassVar[dict[str, tuple[str, ...]]] = {"mode": MODES}
    key_attributes: ClassVar[tuple[str, ...]] = ("mode",)

    mode: str
    x: int
    y: int
    window: tuple[int, ...]
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]

    @property
    def sums_absolute_terms(self) -> bool:  # type: ignore[override]
        """Averages are linear: run on |x| they give the sum of |terms| over the divisor."""
        return self.mode != "max"

    def key_traits(self, tensors: Mapping[str, Tensor]) -> tuple[tuple[str, Any], ...]:
        return (*super().key_traits(tensors), ("spatial_rank", len(self.window)))

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        return math.prod(self.window)

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        return tensors["y"].size * math.prod(self.window) + tensors["x"].size

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x = inputs["x"]
        return {"y": window_of(self).outputs(f"pooling[{self.mode}](x='{x.name}')", self.mode, "x", x)}

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        return window_of(self).scratch_bytes(inputs["x"], limits)

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"pooling '{outputs['y'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_in_order_of(inputs["x"], dims)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x = graph.tensor("x", (2, 3, 5, 6), layout="NHWC")
        y = graph.pooling(
            x, "average_count_exclude_pad", (3, 2), (2, 2), pre_padding=(1, 0), post_padding=(1, 1), name="pooling"
        )
        y.set_output(True)
        return graph.nodes[-1]
