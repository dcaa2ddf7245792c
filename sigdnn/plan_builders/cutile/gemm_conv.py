"""What the conv fprop builders on ``cutile.matmul``'s GEMM kernel share: the dtypes they take, their
configurations, availability, and the pixel view of an NC-first tensor.

A subclass (``conv_1x1``, ``conv_im2col``) says how its conv becomes a GEMM
in ``plan``: the GEMM's spec and views first, then whatever its ``build``
needs. Both rank below the CuTe convs (16-bit NHWC, tuned) and above the
implicit GEMM's element gathers (``conv_gemm``).
"""

from __future__ import annotations

import itertools
import math
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from sigdnn.dtypes import DataType
from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.cutile import pointwise
from sigdnn.plan_builders.cutile.matmul import COMPUTE, config_labels, mma_of, serves_gemm
from sigdnn.plan_builders.cutile.matmul_codegen import MMA_INPUTS, OUTPUTS, MatmulSpec, Operand
from sigdnn.plan_builders.cutile.matmul_layout import GemmViews
from sigdnn.registry.contracts import PlanBuilder
from sigdnn.runtime.device import Device
from sigdnn.signature_keys import SignatureKey


def pixels_view(t: Tensor) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """t [N, C, spatial...] as (N, P, C) dims and strides, P the flattened spatial dims; ValueError where the
    spatial strides do not flatten into one."""
    spatial = [(d, s) for d, s in zip(t.dims[2:], t.strides[2:]) if d > 1]
    pixels = math.prod(d for d, _ in spatial)
    for (_, outer), (inner_d, inner_s) in itertools.pairwise(spatial):
        if outer != inner_d * inner_s:
            raise ValueError(f"tensor '{t.name}': spatial dims {list(t.dims[2:])} with strides "
                             f"{list(t.strides[2:])} do not flatten into one pixel dim")  # fmt: skip
    return (t.dims[0], pixels, t.dims[1]), (t.strides[0], spatial[-1][1] if spatial else 1, t.strides[1])


class GemmConvBuilder(PlanBuilder):
    """A conv_fprop builder whose plan runs the GEMM kernel over views of A, the filter and y."""

    library = "cutile"
    device = "gpu"
    ops = ("conv_fprop",)
    priority = -1  # below the CuTe convs, above cutile.conv_fprop_gemm; the lower engine id first among these

    def available(self) -> str | None:
        return pointwise.unavailable_reason()  # cuTile importable, a GPU present

    def serves(self, key: SignatureKey) -> bool:
        return serves_gemm(key, "conv_fprop", ("x", "w", "y"))

    @abstractmethod
    def plan(self, node: Node, graph: Graph) -> tuple[Any, ...]:
        """(the GEMM's spec without a configuration, its views, what ``build`` needs besides), or NotSupported."""

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        self.plan(node, graph)

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        """cutile.matmul's configurations for the GEMM (its default first)."""
        spec, views = self.plan(nodes[0], graph)[:2]
        return config_labels(spec.mma, views, device)

    def dtypes(self, node: Node, graph: Graph) -> tuple[list[str], DataType]:
        """The node's (x, w, y) dtypes and compute dtype where the GEMM kernel takes them, else NotSupported."""
        op, where = node.op, f"node '{node.name}'"
        if not isinstance(op, ConvFprop):
            raise NotSupported(f"{where}: {self.name} runs conv_fprop only")
        dtypes = [str(graph.dtype_of(graph.tensors[uid])) for uid in (op.x, op.w, op.y)]
        compute = graph.compute_dtype_of(node)
        if dtypes[0] not in MMA_INPUTS or dtypes[1] not in MMA_INPUTS or dtypes[2] not in OUTPUTS:
            raise NotSupported(f"{where}: dtypes x {dtypes[0]}, w {dtypes[1]}, y {dtypes[2]}; x and w take "
                               f"{', '.join(MMA_INPUTS)}, y {', '.join(OUTPUTS)}")  # fmt: skip
        if str(compute) not in COMPUTE:
            raise NotSupported(f"{where}: compute dtype {compute}; supported: {', '.join(COMPUTE)}")
        return dtypes, compute


def gemm_spec(dtypes: list[str], compute: DataType, views: GemmViews) -> MatmulSpec:
    """The GEMM of x / A (dtypes[0]) by the filter (dtypes[1]) into y (dtypes[2]) over ``views``, unconfigured."""
    operands = [Operand(d, v.transposed, v.batched) for d, v in zip(dtypes, (views.a, views.b, views.c))]
    return MatmulSpec(*operands, dtypes[2], mma_of(*dtypes[:2], compute))
