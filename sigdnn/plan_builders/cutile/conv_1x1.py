"""cuTile 1x1 conv fprop as a GEMM on ``cutile.matmul``'s kernel: tile loads instead of the implicit GEMM's gathers.

A 1x1 filter with stride 1 and no padding reads each output pixel's own
input channels, so per image the conv is a matrix product over the
flattened pixels P:

    y[n, :, p]^T = x[n, :, p]^T @ w[:, :]^T,    i.e.  (P, C) @ (C, K) -> (P, K)

Every tensor is passed as a strided view of its own memory (no copies):
NHWC data is (P, C) row-major, so the batch folds into M (one GEMM of N x P
rows); NCHW data is the same matrices column-major, which the GEMM kernel
loads transposed, one batch entry an image. The bottleneck convs of
ResNet-style models (two of every three in resnet50), the expand and project
convs of MobileNet / EfficientNet and DenseNet's bottlenecks are 1x1, in
every layout an ONNX export or a framework hands over. Operands, precision
(native 16-bit, TF32 for a 16-bit compute dtype, else exact float32) and
configuration choice (split-K for few tiles) are ``cutile.matmul``'s.

Declines, with the reason: larger filters, strides, padding, groups, and
spatial dims whose strides do not flatten into one (those go to
``cutile.conv_fprop_gemm``).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from sigdnn.dtypes import DataType
from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.tensor import Tensor
from sigdnn.plan_builders.cutile import pointwise
from sigdnn.plan_builders.cutile.matmul import COMPUTE, config_labels, gemm_plan, mma_of, serves_gemm
from sigdnn.plan_builders.cutile.matmul_codegen import MMA_INPUTS, OUTPUTS, MatmulSpec, Operand
from sigdnn.plan_builders.cutile.matmul_layout import GemmViews, plan_views
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
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


def gemm_dtypes(builder: str, node: Node, graph: Graph) -> tuple[list[str], DataType]:
    """A conv_fprop's (x, w, y) dtypes and compute dtype where the GEMM kernel takes them, else NotSupported."""
    op, where = node.op, f"node '{node.name}'"
    if not isinstance(op, ConvFprop):
        raise NotSupported(f"{where}: {builder} runs conv_fprop only")
    dtypes = [str(graph.dtype_of(graph.tensors[uid])) for uid in (op.x, op.w, op.y)]
    compute = graph.compute_dtype_of(node)
    if dtypes[0] not in MMA_INPUTS or dtypes[1] not in MMA_INPUTS or dtypes[2] not in OUTPUTS:
        raise NotSupported(f"{where}: dtypes x {dtypes[0]}, w {dtypes[1]}, y {dtypes[2]}; x and w take "
                           f"{', '.join(MMA_INPUTS)}, y {', '.join(OUTPUTS)}")  # fmt: skip
    if str(compute) not in COMPUTE:
        raise NotSupported(f"{where}: compute dtype {compute}; supported: {', '.join(COMPUTE)}")
    return dtypes, compute


class CutileConv1x1Builder(PlanBuilder):
    name = "cutile.conv_fprop_1x1"
    engine_id = IN_TREE[name]
    library = "cutile"
    device = "gpu"
    ops = ("conv_fprop",)
    priority = -1  # below the CuTe convs (16-bit NHWC, tuned), above cutile.conv_fprop_gemm's gathers

    def available(self) -> str | None:
        return pointwise.unavailable_reason()  # cuTile importable, a GPU present

    def serves(self, key: SignatureKey) -> bool:
        return serves_gemm(key, "conv_fprop", ("x", "w", "y"))

    def plan(self, node: Node, graph: Graph) -> tuple[MatmulSpec, GemmViews]:
        """The GEMM's spec (without a configuration) and views, or NotSupported saying why."""
        op, where = node.op, f"node '{node.name}'"
        dtypes, compute = gemm_dtypes(self.name, node, graph)
        x, w, y = graph.tensors[op.x], graph.tensors[op.w], graph.tensors[op.y]
        if any(k != 1 for k in w.dims[2:]) or x.dims[1] != w.dims[1]:
            raise NotSupported(f"{where}: filter {list(w.dims)} for {x.dims[1]} channels; {self.name} runs "
                               "ungrouped 1x1 filters")  # fmt: skip
        if any(s != 1 for s in op.stride) or any(op.pre_padding) or any(op.post_padding):
            pads = f"padding {list(op.pre_padding)} / {list(op.post_padding)}"
            raise NotSupported(f"{where}: stride {list(op.stride)}, {pads}; {self.name} runs stride 1 unpadded")
        try:
            (n, p, c), (sn, sp, sc) = pixels_view(x)
            _, (yn, yp, yk) = pixels_view(y)
            k = y.dims[1]
            views = plan_views(((n, p, c), (sn, sp, sc)), ((c, k), (w.strides[1], w.strides[0])),
                               ((n, p, k), (yn, yp, yk)))  # fmt: skip
        except ValueError as e:
            raise NotSupported(f"{where}: {e}") from None
        operands = [Operand(d, v.transposed, v.batched) for d, v in zip(dtypes, (views.a, views.b, views.c))]
        return MatmulSpec(*operands, dtypes[2], mma_of(*dtypes[:2], compute)), views

    def check(self, node: Node, graph: Graph, device: Device | None = None) -> None:
        self.plan(node, graph)

    def configs(self, nodes: Sequence[Node], graph: Graph, device: Device | None = None) -> list[str]:
        """cutile.matmul's configurations for this GEMM (its default first)."""
        spec, views = self.plan(nodes[0], graph)
        return config_labels(spec.mma, views, device)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        spec, views = self.plan(node, graph)
        return gemm_plan(spec, views, context.device, context.config, ["x", "w", "y"], where=f"node '{node.name}'")
