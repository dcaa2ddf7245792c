"""conv_dgrad: dx, the gradient of conv_fprop's x, from dy and w (cuDNN's DY, W -> DX).

dy is [N, K, out...], w is [K, C/groups, kernel...], dx is [N, C, in...].
The forward rule maps many input sizes to one output size when a stride is
above 1, and the group count is not in any input, so dx's dims are inferred
only for an ungrouped convolution with every stride 1; otherwise the caller
gives them (``dims``, as cuDNN's set_dim on DX), and they are checked to
produce dy under the forward rule.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.limits import Limits
from sigdnn.graph.ops.base import require_float
from sigdnn.graph.ops.conv_window import WINDOW_WIRE_FIELDS, ConvWindowOp
from sigdnn.graph.ops.shapes import packed_in_order_of
from sigdnn.graph.ops.windows import (
    check_taps,
    padded_bytes,
    spatial_rank,
)
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class ConvDgrad(ConvWindowOp):
    kind: ClassVar[str] = "conv_dgrad"
    table: ClassVar[str] = "ConvDgradAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("dy", "w")
    output_ports: ClassVar[tuple[str, ...]] = ("dx",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("dy", "uid"),
        ("w", "uid"),
        ("dx", "uid"),
        *WINDOW_WIRE_FIELDS,
        ("dims", "i64[]"),
    )

    dy: int
    w: int
    dx: int
    dims: tuple[int, ...] = ()  # dx's dims when the caller gives them; () = inferred

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """A dx element gathers at most K/groups x taps products."""
        w, dx = tensors["w"], tensors["dx"]
        groups = dx.dims[1] // w.dims[1]
        return w.dims[0] // groups * math.prod(w.dims[2:])

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """Multiply-adds: each dy element meets C/groups x taps weights."""
        return tensors["dy"].size * math.prod(tensors["w"].dims[1:])

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        dy, w = inputs["dy"], inputs["w"]
        where = f"conv_dgrad(dy='{dy.name}', w='{w.name}')"
        s = spatial_rank(where, "dy", dy)
        if w.rank != dy.rank:
            raise GraphError(f"{where}: w has rank {w.rank}, dy has rank {dy.rank}; they must match")
        self.check_window(where, s)
        n, k = dy.dims[:2]
        if w.dims[0] != k:
            raise GraphError(f"{where}: w's output channels {w.dims[0]} differ from dy's channels {k}")
        if not self.dims:
            return {"dx": self._inferred(where, dy, w)}
        dims = self.dims
        if len(dims) != dy.rank or min(dims) < 1:
            raise GraphError(f"{where}: dims {list(dims)} must be {dy.rank} positive sizes (dx's N, C, spatial...)")
        if dims[0] != n:
            raise GraphError(f"{where}: dims {list(dims)} have batch {dims[0]}, dy has {n}")
        c, cg = dims[1], w.dims[1]
        if c % cg:
            raise GraphError(f"{where}: w's channel count {cg} does not divide dx's {c} (dims {list(dims)})")
        if k % (c // cg):
            raise GraphError(f"{where}: {c // cg} groups do not divide w's output channels {k}")
        out = self.forward_outputs(where, dims[2:], w.dims[2:])
        if out != dy.dims[2:]:
            raise GraphError(
                f"{where}: dx dims {list(dims)} give a forward output of spatial dims {list(out)}, "
                f"dy has {list(dy.dims[2:])}"
            )
        return {"dx": dims}

    def _inferred(self, where: str, dy: Tensor, w: Tensor) -> tuple[int, ...]:
        """dx's dims for an ungrouped, stride-1 convolution: the only case the inputs determine."""
        if max(self.stride) > 1:
            raise GraphError(
                f"{where}: with stride {list(self.stride)} several dx sizes give dy's; give dx's dims (dims=...)"
            )
        size = []
        for i in range(len(self.stride)):
            span = self.dilation[i] * (w.dims[2 + i] - 1) + 1
            extent = dy.dims[2 + i] - 1 + span - self.pre_padding[i] - self.post_padding[i]
            if extent < 1:
                raise GraphError(
                    f"{where}: spatial dim {i}: no dx size gives dy's {dy.dims[2 + i]} (padding too large)"
                )
            size.append(extent)
        return (dy.dims[0], w.dims[1], *size)

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """A padded float64 dx (padding is a free attribute), and a bound on kernel taps."""
        w = inputs["w"]
        check_taps(f"kernel '{w.name}'", w.dims[2:], limits)
        dims = self.dims or self._inferred("conv_dgrad", inputs["dy"], w)
        return padded_bytes(dims, self.pre_padding, self.post_padding)

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"conv_dgrad '{outputs['dx'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """dx packed in dy's axis order."""
        return packed_in_order_of(inputs["dy"], dims)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        dy = graph.tensor("dy", (2, 6, 3, 4), layout="NHWC")
        w = graph.tensor("w", (6, 2, 3, 3), layout="NHWC")  # two groups, stride 2: dx's dims are given
        graph.conv_dgrad(dy, w, padding=(1, 0), stride=(2, 1), dims=(2, 4, 5, 6), name="dgrad").set_output(True)
        return graph.nodes[-1]
