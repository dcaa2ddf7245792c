"""conv_wgrad: dw, the gradient of conv_fprop's w, from x and dy (cuDNN's X, DY -> DW).

x is [N, C, in...], dy is [N, K, out...], dw is [K, C/groups, kernel...].
With a stride above 1 several kernel sizes give one output size, and the
group count is in no input, so dw's dims are inferred only for an ungrouped
convolution with every stride 1; otherwise the caller gives them (``dims``,
as cuDNN's set_dim on DW), and they are checked to produce dy.
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
class ConvWgrad(ConvWindowOp):
    kind: ClassVar[str] = "conv_wgrad"
    table: ClassVar[str] = "ConvWgradAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x", "dy")
    output_ports: ClassVar[tuple[str, ...]] = ("dw",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("x", "uid"),
        ("dy", "uid"),
        ("dw", "uid"),
        *WINDOW_WIRE_FIELDS,
        ("dims", "i64[]"),
    )

    x: int
    dy: int
    dw: int
    dims: tuple[int, ...] = ()  # dw's dims when the caller gives them; () = inferred

    def reduction_length(self, tensors: Mapping[str, Tensor], port: str) -> int:
        """A dw element sums over the batch and every output position."""
        dy = tensors["dy"]
        return dy.dims[0] * math.prod(dy.dims[2:])

    def work(self, tensors: Mapping[str, Tensor]) -> int:
        """Multiply-adds: each dy element meets C/groups x taps inputs."""
        return tensors["dy"].size * math.prod(tensors["dw"].dims[1:])

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x, dy = inputs["x"], inputs["dy"]
        where = f"conv_wgrad(x='{x.name}', dy='{dy.name}')"
        s = spatial_rank(where, "x", x)
        if dy.rank != x.rank:
            raise GraphError(f"{where}: dy has rank {dy.rank}, x has rank {x.rank}; they must match")
        self.check_window(where, s)
        if dy.dims[0] != x.dims[0]:
            raise GraphError(f"{where}: dy has batch {dy.dims[0]}, x has {x.dims[0]}; they must match")
        dims = self.dims or self._inferred(where, x, dy)
        if len(dims) != x.rank or min(dims) < 1:
            raise GraphError(
                f"{where}: dims {list(dims)} must be {x.rank} positive sizes (dw's K, C/groups, kernel...)"
            )
        c, k, cg = x.dims[1], dy.dims[1], dims[1]
        if dims[0] != k:
            raise GraphError(f"{where}: dims {list(dims)} have {dims[0]} output channels, dy has {k}")
        if c % cg:
            raise GraphError(f"{where}: dw's channel count {cg} does not divide x's {c} (dims {list(dims)})")
        if k % (c // cg):
            raise GraphError(f"{where}: {c // cg} groups do not divide dy's channels {k}")
        out = self.forward_outputs(where, x.dims[2:], dims[2:])
        if out != dy.dims[2:]:
            raise GraphError(
                f"{where}: a kernel of dims {list(dims[2:])} gives a forward output of spatial dims {list(out)}, "
                f"dy has {list(dy.dims[2:])}"
            )
        return {"dw": dims}

    def _inferred(self, where: str, x: Tensor, dy: Tensor) -> tuple[int, ...]:
        """dw's dims for an ungrouped, stride-1 convolution: the only case the inputs determine."""
        if max(self.stride) > 1:
            raise GraphError(
                f"{where}: with stride {list(self.stride)} several kernel sizes give dy's; give dw's dims (dims=...)"
            )
        kernel = []
        for i in range(len(self.stride)):
            span = x.dims[2 + i] + self.pre_padding[i] + self.post_padding[i] - dy.dims[2 + i] + 1
            taps, rest = divmod(span - 1, self.dilation[i])
            if span < 1 or rest:
                raise GraphError(
                    f"{where}: spatial dim {i}: no kernel with dilation {self.dilation[i]} takes x's "
                    f"{x.dims[2 + i]} to dy's {dy.dims[2 + i]}"
                )
            kernel.append(taps + 1)
        return (dy.dims[1], x.dims[1], *kernel)

    def scratch_bytes(self, inputs: Mapping[str, Tensor], limits: Limits) -> int:
        """The padded float64 copy of x (padding is a free attribute), and a bound on kernel taps."""
        x = inputs["x"]
        dims = self.dims or self._inferred("conv_wgrad", x, inputs["dy"])
        check_taps("kernel of dw", dims[2:], limits)
        return padded_bytes(x.dims, self.pre_padding, self.post_padding)

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"conv_wgrad '{outputs['dw'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        """dw packed in x's axis order (KRSC for NHWC x, as cuDNN pairs them)."""
        return packed_in_order_of(inputs["x"], dims)

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        x = graph.tensor("x", (2, 4, 5, 6), layout="NHWC")
        dy = graph.tensor("dy", (2, 6, 3, 4), layout="NHWC")
        graph.conv_wgrad(x, dy, padding=(1, 0), stride=(2, 1), dims=(6, 2, 3, 3), name="wgrad").set_output(True)
        return graph.nodes[-1]
