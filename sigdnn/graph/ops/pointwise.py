"""Pointwise: one elementwise mode over up to three broadcast inputs.

Ports follow cuDNN: inputs X, B, T are ``in_0``, ``in_1``, ``in_2``; the output
is ``out_0``. Backward activations take (dy, x); binary_select takes
(a, b, mask). docs/ops.md gives each mode's formula.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.layout import packed_like
from sigdnn.graph.ops.base import Op, broadcast_dims
from sigdnn.graph.ops.shapes import check_choice
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph
    from sigdnn.graph.node import Node


@attrs.frozen
class ModeInfo:
    arity: int
    category: str  # arithmetic, compare, logical, math, activation, activation_bwd, index, select
    params: tuple[str, ...] = ()


_RELU = ("relu_lower_clip", "relu_upper_clip", "relu_lower_clip_slope")
MODES: dict[str, ModeInfo] = {
    **{m: ModeInfo(2, "arithmetic") for m in ("add", "sub", "mul", "div", "add_square", "max", "min", "mod", "pow")},
    **{m: ModeInfo(2, "compare") for m in ("cmp_eq", "cmp_neq", "cmp_gt", "cmp_ge", "cmp_lt", "cmp_le")},
    "logical_and": ModeInfo(2, "logical"),
    "logical_or": ModeInfo(2, "logical"),
    "logical_not": ModeInfo(1, "logical"),
    **{
        m: ModeInfo(1, "math")
        for m in (
            "abs",
            "neg",
            "ceil",
            "floor",
            "sqrt",
            "rsqrt",
            "reciprocal",
            "exp",
            "log",
            "sin",
            "cos",
            "tan",
            "erf",
            "identity",
        )
    },
    "relu_fwd": ModeInfo(1, "activation", _RELU),
    "relu_bwd": ModeInfo(2, "activation_bwd", _RELU),
    "tanh_fwd": ModeInfo(1, "activation"),
    "tanh_bwd": ModeInfo(2, "activation_bwd"),
    "sigmoid_fwd": ModeInfo(1, "activation"),
    "sigmoid_bwd": ModeInfo(2, "activation_bwd"),
    "elu_fwd": ModeInfo(1, "activation", ("elu_alpha",)),
    "elu_bwd": ModeInfo(2, "activation_bwd", ("elu_alpha",)),
    "gelu_fwd": ModeInfo(1, "activation"),
    "gelu_bwd": ModeInfo(2, "activation_bwd"),
    "gelu_approx_tanh_fwd": ModeInfo(1, "activation"),
    "gelu_approx_tanh_bwd": ModeInfo(2, "activation_bwd"),
    "softplus_fwd": ModeInfo(1, "activation", ("softplus_beta",)),
    "softplus_bwd": ModeInfo(2, "activation_bwd", ("softplus_beta",)),
    "swish_fwd": ModeInfo(1, "activation", ("swish_beta",)),
    "swish_bwd": ModeInfo(2, "activation_bwd", ("swish_beta",)),
    "gen_index": ModeInfo(1, "index", ("axis",)),
    "binary_select": ModeInfo(3, "select"),
}
PARAMS = (
    "relu_lower_clip",
    "relu_upper_clip",
    "relu_lower_clip_slope",
    "swish_beta",
    "elu_alpha",
    "softplus_beta",
    "axis",
)


@attrs.frozen
class Pointwise(Op):
    kind: ClassVar[str] = "pointwise"
    table: ClassVar[str] = "PointwiseAttributes"
    input_ports: ClassVar[tuple[str, ...]] = ("in_0", "in_1", "in_2")
    output_ports: ClassVar[tuple[str, ...]] = ("out_0",)
    wire_fields: ClassVar[tuple[tuple[str, str], ...]] = (
        ("mode", "enum"),
        ("in_0", "uid"),
        ("in_1", "uid?"),
        ("in_2", "uid?"),
        ("out_0", "uid"),
        *((p, "i64?" if p == "axis" else "f64?") for p in PARAMS),
    )
    enums: ClassVar[dict[str, tuple[str, ...]]] = {"mode": tuple(MODES)}
    key_attributes: ClassVar[tuple[str, ...]] = ("mode",)

    mode: str
    in_0: int
    out_0: int
    in_1: int | None = None
    in_2: int | None = None
    relu_lower_clip: float | None = None
    relu_upper_clip: float | None = None
    relu_lower_clip_slope: float | None = None
    swish_beta: float | None = None
    elu_alpha: float | None = None
    softplus_beta: float | None = None
    axis: int | None = None

    @classmethod
    def sample(cls, graph: Graph) -> Node:
        a, b = graph.tensor("a", (3, 1, 5)), graph.tensor("b", (4, 1))
        graph.pointwise("swish_bwd", a, b, swish_beta=1.5, name="pointwise").set_output(True)
        return graph.nodes[-1]

    @property
    def info(self) -> ModeInfo:
        check_choice("pointwise", "mode", self.mode, tuple(MODES))
        return MODES[self.mode]

    def params(self) -> dict[str, Any]:
        """The parameters that are set."""
        return {p: getattr(self, p) for p in PARAMS if getattr(self, p) is not None}

    def elementwise(self) -> bool:
        return self.mode != "gen_index"  # gen_index reads positions, not values

    def infer_dims(self, inputs: Mapping[str, Tensor]) -> dict[str, tuple[int, ...]]:
        where = f"pointwise[{self.mode}]"
        given = len(inputs)
        if given != self.info.arity or any(p not in inputs for p in self.input_ports[:given]):
            raise GraphError(
                f"{where} takes {self.info.arity} input(s) in ports in_0..in_{self.info.arity - 1}, got {list(inputs)}"
            )
        if self.mode == "gen_index":
            rank = inputs["in_0"].rank
            if self.axis is None or not 0 <= self.axis < rank:
                raise GraphError(f"{where}: axis {self.axis} out of range for rank {rank}")
            return {"out_0": inputs["in_0"].dims}
        return {"out_0": broadcast_dims([t.dims for t in inputs.values()], where)}

    def check(self, inputs: Mapping[str, Tensor], outputs: Mapping[str, Tensor]) -> None:
        where = f"pointwise[{self.mode}]"
        extra = set(self.params()) - set(self.info.params)
        if extra:
            raise GraphError(f"{where} takes no parameter {sorted(extra)}")
        if self.relu_lower_clip_slope is not None and self.relu_lower_clip_slope < 0:
            raise GraphError(f"{where}: relu_lower_clip_slope must be >= 0")

    def default_output_strides(
        self, inputs: Mapping[str, Tensor], port: str, dims: tuple[int, ...]
    ) -> tuple[int, ...] | None:
        for t in inputs.values():
            if t.rank == len(dims) and t.size > 1:
                return packed_like(dims, t.strides)
        return None
