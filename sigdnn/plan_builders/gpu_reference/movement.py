"""GPU reference reshape, transpose, slice and concatenate: element copies by a host-made index map.

Each y element's source is named by its storage offset in x (the op's index
map applied to x's own offsets), so strides of either side cost nothing
extra. Equal dtypes copy the bits (a gather and a scatter, no value passes
through float64: an int64 past 2^53 or a NaN payload stays as it is); a
different output dtype reads the exact value (int64 for integer and bool
inputs, float64 otherwise) and rounds it once.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.gpu_reference import base
from sigdnn.plan_builders.gpu_reference.arrays import Array, gather, map_arguments, offsets
from sigdnn.plan_builders.gpu_reference.backend import TILE, Gpu, kernel_dtype, run_on
from sigdnn.plan_builders.gpu_reference.tensors import DECODES, element_strides, scatter
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import ExecutionContext

Placement = Callable[[dict[str, np.ndarray]], list[tuple[str, np.ndarray, tuple[slice, ...]]]]
"""x's storage offsets by port -> pieces (port, source offsets of the piece, where in y it goes)."""


class MovePlan(NodePlan):
    def __init__(self, place: Placement, y_dtype: DataType) -> None:
        self._place = place
        self._y_dtype = y_dtype

    def execute(self, buffers: Mapping[str, Any], context: ExecutionContext) -> None:
        with run_on(context.device.context, context.stream) as gpu:
            buffers, copy_back = gpu.on_device(buffers, ("y",))
            y = buffers["y"]
            ins = {p: b for p, b in buffers.items() if p != "y"}
            sources = {p: offsets(tuple(b.shape), element_strides(b)) for p, b in ins.items()}
            destination = offsets(tuple(y.shape), element_strides(y))
            for port, source, where in self._place(sources):
                x = ins[port]
                raw = gpu.raw(x, tuple(x.shape), element_strides(x))
                target = destination[where]
                if np.dtype(x.dtype) == np.dtype(y.dtype):
                    _copy_bits(gpu, raw, source, y, target)
                else:
                    wide = np.int64 if np.dtype(x.dtype).kind in "biu" else np.float64
                    value = Array.empty(gpu, source.shape, wide)
                    gather(gpu, raw, source, value.data, 0.0, DECODES.get(np.dtype(x.dtype).name, "DECODE_CAST"))
                    scatter(gpu, value, gpu.raw(y, tuple(y.shape), element_strides(y)), target, self._y_dtype)
            copy_back()


def _copy_bits(gpu: Gpu, raw: Any, source: np.ndarray, y: Any, target: np.ndarray) -> None:
    scratch = gpu.empty(source.size, kernel_dtype(np.dtype(y.dtype)))
    gather(gpu, raw, source, scratch, 0.0, "DECODE_RAW")
    _scatter_bits(gpu, scratch, y, target)


def _scatter_bits(gpu: Gpu, flat: Any, y: Any, target: np.ndarray) -> None:
    n = target.size
    raw = gpu.raw(y, tuple(y.shape), element_strides(y))
    rows, cols, c, dense = map_arguments(gpu, target)
    gpu.launch("scatter", (-(-n // TILE), 1, 1), flat, rows, cols, c, raw, n, TILE, gpu.constant("ENCODE_RAW"), dense)


class MoveBuilder(PlanBuilder):
    library: ClassVar[str] = base.LIBRARY
    device: ClassVar[str] = "gpu"

    def available(self) -> str | None:
        return base.unavailable_reason()  # (looked up at each call: tests replace it)

    @abstractmethod
    def placement(self, node: Node, graph: Graph) -> Placement:
        """Where each y element comes from."""

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        return MovePlan(self.placement(node, graph), dict(context.key.outputs)["y"])


_ALL = (slice(None),)


class GpuReferenceReshape(MoveBuilder):
    name: ClassVar[str] = "gpu_reference.reshape"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("reshape",)

    def placement(self, node: Node, graph: Graph) -> Placement:
        dims = node.op.dims
        return lambda src: [("x", src["x"].reshape(dims), _ALL)]


class GpuReferenceTranspose(MoveBuilder):
    name: ClassVar[str] = "gpu_reference.transpose"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("transpose",)

    def placement(self, node: Node, graph: Graph) -> Placement:
        permutation = node.op.permutation
        return lambda src: [("x", src["x"].transpose(permutation), _ALL)]


class GpuReferenceSlice(MoveBuilder):
    name: ClassVar[str] = "gpu_reference.slice"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("slice",)

    def placement(self, node: Node, graph: Graph) -> Placement:
        op = node.op
        index = tuple(slice(*bounds) for bounds in zip(op.start_indices, op.limit_indices, op.strides))
        return lambda src: [("x", src["x"][index], _ALL)]


class GpuReferenceConcatenate(MoveBuilder):
    name: ClassVar[str] = "gpu_reference.concatenate"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("concatenate",)

    def placement(self, node: Node, graph: Graph) -> Placement:
        op = node.op
        pieces = []
        start = 0
        for port, uid in op.inputs().items():
            extent = graph.tensors[uid].dims[op.axis]
            pieces.append((port, (slice(None),) * op.axis + (slice(start, start + extent),)))
            start += extent
        return lambda src: [(port, src[port], where) for port, where in pieces]
