"""cuTile conv fprop as im2col + GEMM: A written once to the workspace, then ``cutile.matmul``'s tile-loaded GEMM.

The implicit GEMM (``conv_gemm.py``) gathers A's tile element by element on
every K step of every block, which bounds it far below the tensor cores
(1.4-3.4 TFLOP/s of TF32 on vgg11's 14x14 convs, H200). Where A fits the
workspace (``MAX_A_BYTES``: any conv at batch 1, small ones at larger
batches), this builder gathers it once instead (``conv_im2col`` in
``_conv_gemm_kernels.py``: the same index arithmetic, one store a tile),
then multiplies

    y[n, :, p]^T = A[n x P + p, :] @ W[:, :]^T,   A: (N x P, C x taps) rows in the filter's j order

on the GEMM kernel, which loads A and the filter as tiles, splits K where the
output tiles are few, and takes the operands' precision rules of
``cutile.matmul``. y is viewed as the 1x1 builder views it (NHWC folds the
batch into M; NCHW is loaded transposed, one batch entry an image).

Declines with the reason: groups (``cutile.conv_fprop_grouped`` runs them),
a filter not dense in x's j order (KCRS under NCHW x, KRSC under NHWC x),
A past ``MAX_A_BYTES``, and what the implicit GEMM's int32 indices refuse;
``cutile.conv_fprop_gemm`` (ranked below) runs all of those.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.cutile.backend import backend_for
from sigdnn.plan_builders.cutile.conv_gemm import TILE_PIXELS, TILE_REDUCTION, filter_tiles, flat_span, kernel_source
from sigdnn.plan_builders.cutile.conv_grouped import GRID_Y, LARGEST, channels_innermost, fits, padded_to_3, view_5d
from sigdnn.plan_builders.cutile.gemm_conv import GemmConvBuilder, gemm_spec, pixels_view
from sigdnn.plan_builders.cutile.matmul import CutileMatmulPlan, gemm_plan
from sigdnn.plan_builders.cutile.matmul_codegen import MatmulSpec
from sigdnn.plan_builders.cutile.matmul_layout import GemmViews, plan_views
from sigdnn.plan_builders.cutile.pooling import as_5d
from sigdnn.plan_builders.cutile.tiling import cdiv
from sigdnn.registry.contracts import BuildContext, NodePlan
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import ExecutionContext

# the im2col matrix's bound; past it the implicit GEMM runs the conv. 1 GiB: at 256 MiB the 3 x 3 x 3 convs of
# torchvision's r3d_18 and mc3_18 at batch 1 (A of 50,176 x 1,728 float32, 347 MB) fell to the implicit GEMM, and
# those exports ran 0.43x / 0.29x torch eager where r2plus1d_18, every conv on this builder, ran 0.94x (H100, the
# models benchmark)
MAX_A_BYTES = 2**30
ALIGN = 256  # bytes: split-K's partials start at a multiple of it after A


def a_bytes(shape: tuple[int, int], dtype: np.dtype) -> int:
    """Workspace bytes A takes, rounded up to ALIGN (where split-K's partials may start)."""
    return -(-math.prod(shape) * dtype.itemsize // ALIGN) * ALIGN


class Im2colGemmPlan(NodePlan):
    """Two steps on one stream: the im2col launch writing A to the workspace, then the GEMM reading it."""

    def __init__(self, im2col: Any, grid: tuple[int, int, int], constants: tuple[Any, ...], x_span: int,
                 a_shape: tuple[int, int], a_dtype: np.dtype, gemm: CutileMatmulPlan) -> None:  # fmt: skip
        self.im2col, self.grid, self.constants = im2col, grid, constants
        self.x_span, self.a_shape, self.a_dtype = x_span, a_shape, a_dtype
        self.gemm = gemm
        self.workspace_bytes = max(a_bytes(a_shape, a_dtype), gemm.workspace_bytes)

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        backend = self.gemm.backend
        a = backend.view(context.workspace, (math.prod(self.a_shape),), (1,), self.a_dtype)
        x = backend.view1d(buffers["x"], self.x_span, False)
        args = (x, backend.view(a, self.a_shape, (self.a_shape[1], 1), self.a_dtype), *self.constants)
        multiply = self.gemm.bind({**buffers, "@a": a}, context)
        launch, stream, kernel, grid = backend.launch, context.stream, self.im2col, self.grid

        def run() -> None:
            launch(stream, grid, kernel, args)
            multiply()

        return run

    def execute(self, buffers: Mapping[str, Any], context: ExecutionContext) -> None:
        self.bind(buffers, context)()


class CutileConvIm2colBuilder(GemmConvBuilder):
    name = "cutile.conv_fprop_im2col"
    engine_id = IN_TREE[name]  # above cutile.conv_fprop_1x1's: that one first where both apply

    def plan(self, node: Node, graph: Graph) -> tuple[MatmulSpec, GemmViews, tuple[Any, ...], tuple[int, int]]:
        """(the GEMM's spec without a configuration, its views, the im2col launch's scalars, A's shape), or
        NotSupported saying why."""
        op, where = node.op, f"node '{node.name}'"
        dtypes, compute = self.dtypes(node, graph)
        x, w, y = graph.tensors[op.x], graph.tensors[op.w], graph.tensors[op.y]
        if x.dims[1] != w.dims[1]:
            raise NotSupported(f"{where}: {x.dims[1] // w.dims[1]} groups; {self.name} runs ungrouped convs")
        fastest = channels_innermost(x)
        if filter_tiles(w, 1, fastest) is None:
            raise NotSupported(f"{where}: filter '{w.name}' strides {list(w.strides)} are not dense in x's "
                               f"{'channels' if fastest else 'taps'}-fastest order")  # fmt: skip
        y_dims = as_5d(y)[0]
        pixels, reduction = y_dims[0] * math.prod(y_dims[2:]), math.prod(w.dims[1:])
        itemsize = graph.dtype_of(x).itemsize
        if pixels * reduction * itemsize > MAX_A_BYTES:
            raise NotSupported(f"{where}: A of {pixels} x {reduction} is past the im2col bound of "
                               f"{MAX_A_BYTES >> 20} MiB")  # fmt: skip
        try:
            fits(x, w, y, op, pixels, TILE_PIXELS)
            scalars = (
                pixels, *y_dims[2:],
                *as_5d(x)[0][2:],
                w.dims[1], reduction,
                *view_5d(x)[1],
                *as_5d(w)[0][2:],
                *padded_to_3(op.stride, 1),
                *padded_to_3(op.pre_padding, 0),
                *padded_to_3(op.dilation, 1),
            )  # fmt: skip
            if max(*scalars, reduction + TILE_REDUCTION) > LARGEST:
                raise ValueError(f"a size, stride, padding or dilation of {max(scalars)} is past int32")
            if cdiv(reduction, TILE_REDUCTION) > GRID_Y:
                raise ValueError(f"{reduction} reduction indices need {cdiv(reduction, TILE_REDUCTION)} im2col "
                                 f"column tiles; a grid's second dim holds {GRID_Y}")  # fmt: skip
            k = y.dims[1]
            n, p, y_strides = y.dims[0], pixels // y.dims[0], pixels_view(y)[1]
            a = ((n, p, reduction), (p * reduction, reduction, 1))
            views = plan_views(a, ((reduction, k), (1, reduction)), ((n, p, k), y_strides))
        except ValueError as e:
            raise NotSupported(f"{where}: {e}") from None
        constants = (*scalars, TILE_PIXELS, TILE_REDUCTION, fastest)
        return gemm_spec(dtypes, compute, views), views, constants, (pixels, reduction)

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        spec, views, constants, (pixels, reduction) = self.plan(node, graph)
        x = graph.tensors[node.op.x]
        a_dtype = np.dtype(graph.dtype_of(x).numpy)
        gemm = gemm_plan(spec, views, context.device, context.config, ["@a", "w", "y"], where=f"node '{node.name}'",
                         workspace_at=a_bytes((pixels, reduction), a_dtype))  # fmt: skip
        im2col = backend_for(context.device.context).kernel(kernel_source("conv_im2col"))
        grid = (cdiv(pixels, TILE_PIXELS), cdiv(reduction, TILE_REDUCTION), 1)
        return Im2colGemmPlan(im2col, grid, constants, flat_span(x), (pixels, reduction), a_dtype, gemm)
