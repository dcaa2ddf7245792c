"""Fallback: a GPU plan runs a node no GPU builder takes on the reference, with copies around it.

Only with ``Executor("gpu", fallback="reference")``; by default a node no
GPU builder takes is a NoPlanError. The step's builder is a
``FallbackBuilder`` named "<reference builder> (fallback)", so the plan,
``inspect`` and validation reports name every node that fell back, and the
step's ``declines`` say why each GPU builder declined it.

Running a fallback step synchronizes the stream: its inputs are copied to
the host, the reference computes, and its outputs are copied back into the
device buffers (read-modify-write over each output's span, so the gaps of a
strided caller buffer keep their contents).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import NoPlanError, NotSupported
from sigdnn.executor.host import strided_view
from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import span_elements
from sigdnn.graph.node import Node
from sigdnn.registry.contracts import BuildContext, NodePlan, PlanBuilder
from sigdnn.registry.registry import Registry
from sigdnn.runtime.device import CPU, ExecutionContext
from sigdnn.signature_keys import SignatureKey

FALLBACKS = ("reference",)


class FallbackPlan(NodePlan):
    """Runs a reference plan on host copies of a GPU step's buffers."""

    def __init__(self, inner: NodePlan, node: Node, graph: Graph) -> None:
        self.inner = inner
        op = node.op
        self._inputs = tuple(op.inputs())
        self._outputs = {
            port: (graph.tensors[uid], graph.dtype_of(graph.tensors[uid])) for port, uid in op.outputs().items()
        }

    def execute(self, buffers: Mapping[str, Any], context: ExecutionContext) -> None:
        if all(isinstance(b, np.ndarray) for b in buffers.values()):  # host buffers (an emulated device)
            self.inner.execute(buffers, ExecutionContext())
            return
        gpu = context.device.context
        host = {p: gpu.to_host(buffers[p]) for p in self._inputs}
        outs = {p: np.empty(t.dims, dtype.numpy) for p, (t, dtype) in self._outputs.items()}
        self.inner.execute({**host, **outs}, ExecutionContext())
        for port, (tensor, dtype) in self._outputs.items():
            _upload_into(gpu, buffers[port], outs[port], tensor.dims, buffers[port].strides, dtype)


def _upload_into(gpu: Any, device: Any, host: np.ndarray, dims: tuple[int, ...], strides: Any, dtype: DataType) -> None:
    span = device.as_strided((span_elements(dims, strides),), (1,))
    staged = gpu.to_host(span)
    strided_view(staged, 0, dims, tuple(strides), dtype)[...] = host
    gpu.copy_into(span, staged)


class FallbackBuilder(PlanBuilder):
    """A CPU builder presented as a GPU one: same engine id, name marked "(fallback)"."""

    device = "gpu"

    def __init__(self, inner: PlanBuilder) -> None:
        self.inner = inner
        self.name = f"{inner.name} (fallback)"  # type: ignore[misc]
        self.engine_id = inner.engine_id  # type: ignore[misc]
        self.library = inner.library  # type: ignore[misc]
        self.ops = inner.ops  # type: ignore[misc]

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        inner = self.inner.build(node, graph, BuildContext(context.key, CPU, graph))
        return FallbackPlan(inner, node, graph)


def fallback_builder(
    registry: Registry, node: Node, graph: Graph, key: SignatureKey, declined: NoPlanError
) -> PlanBuilder:
    """The best reference builder that takes ``node``; the GPU's NoPlanError (with both reasons) when none does."""
    why = []
    for builder in registry.candidates(key, "cpu", node, graph):
        try:
            builder.check(node, graph, CPU)
        except NotSupported as e:
            why.append(f"{builder.name}: {e}")
            continue
        return FallbackBuilder(builder)
    raise NoPlanError(f"{declined}; no fallback either: {'; '.join(why) or 'no reference builder serves this key'}")
