"""conv_fprop: y = x ⋆ w (cross-correlation), 1 to 3 spatial dims, grouped.

x is [N, C, spatial...], w is [K, C/groups, kernel...], y is [N, K, out...]
in logical (NC-first) dims whatever the memory layout. groups = C / w's C.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.layout import packed_like
from sigdnn.graph.ops.base import Op, require_float
from sigdnn.graph.tensor import Tensor


@attrs.frozen
class ConvFprop(Op):
    kind: ClassVar[str] = "conv_fprop"
    table: ClassVar[str] = "ConvFpropAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("x", "w")
    output_ports: ClassVar[tuple[str, ...]] = ("y",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("x", "uid"),
        ("w", "uid"),
        ("y", "uid"),
        ("pre_padding", "i64[]"),
        ("post_padding", "i64[]"),
        ("stride", "i64[]"),
        ("dilation", "i64[]"),
    )

    x: int
    w: int
    y: int
    pre_padding: tuple[int, ...]
    post_padding: tuple[int, ...]
    stride: tuple[int, ...]
    dilation: tuple[int, ...]

    @property
    def spatial_rank(self) -> int:
        return len(self.stride)

    def groups(self, inputs: Mapping[str, Tensor]) -> int:
        return inputs["x"].dims[1] // inputs["w"].dims[1]

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        x, w = inputs["x"], inputs["w"]
        where = f"conv_fprop(x='{x.name}', w='{w.name}')"
        s = self.spatial_rank
        if not 1 <= s <= 3:
            raise GraphError(f"{where}: {s} spatial dims given by stride; 1 to 3 are supported")
        if x.rank != s + 2 or w.rank != s + 2:
            raise GraphError(f"{where}: x and w need rank {s + 2} for {s} spatial dims, have {x.rank} and {w.rank}")
        for name in ("pre_padding", "post_padding", "dilation"):
            if len(getattr(self, name)) != s:
                raise GraphError(f"{where}: {name} has {len(getattr(self, name))} entries, stride has {s}")
        if min(self.stride) < 1 or min(self.dilation) < 1:
            raise GraphError(f"{where}: stride {list(self.stride)} and dilation {list(self.dilation)} must be >= 1")
        if min(self.pre_padding) < 0 or min(self.post_padding) < 0:
            raise GraphError(f"{where}: padding must be >= 0")
        n, c = x.dims[:2]
        k, cg = w.dims[:2]
        if c % cg:
            raise GraphError(f"{where}: w's channel count {cg} does not divide x's {c}")
        groups = c // cg
        if k % groups:
            raise GraphError(f"{where}: {groups} groups do not divide w's output channels {k}")
        out = []
        for i in range(s):
            span = self.dilation[i] * (w.dims[2 + i] - 1) + 1
            padded = x.dims[2 + i] + self.pre_padding[i] + self.post_padding[i]
            if padded < span:
                raise GraphError(
                    f"{where}: spatial dim {i}: padded input {padded} is smaller than the dilated kernel {span}"
                )
            out.append((padded - span) // self.stride[i] + 1)
        return {"y": (n, k, *out)}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        require_float(f"conv_fprop '{outputs['y'].name}'", {**inputs, **outputs})

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        return packed_like(dims, inputs["x"].strides)
