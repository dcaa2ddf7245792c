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

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cutile.gemm_conv import GemmConvBuilder, gemm_spec, pixels_view
from sigdnn.plan_builders.cutile.matmul import gemm_plan
from sigdnn.plan_builders.cutile.matmul_codegen import MatmulSpec
from sigdnn.plan_builders.cutile.matmul_layout import GemmViews, plan_views
from sigdnn.registry.contracts import BuildContext, NodePlan
from sigdnn.registry.engine_ids import IN_TREE


class CutileConv1x1Builder(GemmConvBuilder):
    name = "cutile.conv_fprop_1x1"
    engine_id = IN_TREE[name]

    def plan(self, node: Node, graph: Graph) -> tuple[MatmulSpec, GemmViews]:
        """The GEMM's spec (without a configuration) and views, or NotSupported saying why."""
        op, where = node.op, f"node '{node.name}'"
        dtypes, compute = self.dtypes(node, graph)
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
        return gemm_spec(dtypes, compute, views), views

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        spec, views = self.plan(node, graph)
        return gemm_plan(spec, views, context.device, context.config, ["x", "w", "y"], where=f"node '{node.name}'")
