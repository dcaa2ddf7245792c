"""Step plans that launch one generated kernel: for a node, or for a fused region.

Everything but the buffers is fixed when the plan is built (kernel, grid,
which 1-D view each buffer becomes). ``bind`` goes one step further for the
executor's fast path: it makes the views once and returns a zero-argument
callable that only launches, so a plan executed again on the same buffers
costs one ``ct.launch``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sigdnn.plan_builders.cutile.codegen import AS_BYTES, KernelSpec
from sigdnn.registry.contracts import NodePlan, RegionPlan
from sigdnn.runtime.device import ExecutionContext


def _noop() -> None:
    pass


class KernelLaunch:
    """One generated kernel with its grid and the shape of every argument view."""

    def __init__(self, spec: KernelSpec, backend: Any) -> None:
        self.spec = spec
        self.backend = backend
        self.kernel = backend.kernel(spec)
        size = spec.space.size
        self.grid = (max(1, -(-size // spec.tile)), 1, 1)
        self.empty = size == 0
        main, tail = spec.split
        whole = spec.full_tiles * spec.tile
        # Per argument array: the (offset, length) views it is passed as, and whether as bytes.
        flat = [(0, whole)] * main + [(whole, size - whole)] * tail
        self._inputs = [
            (flat if a.kind == "flat" else [(0, a.span if a.kind == "gather" else 1)], dtype in AS_BYTES)
            for a, dtype in zip(spec.space.inputs, spec.inputs, strict=True)
        ]
        self._outputs = [(flat, spec.value_dtype(v) in AS_BYTES) for v in spec.outputs]

    def args(self, inputs: Sequence[Any], outputs: Sequence[Any]) -> tuple[Any, ...]:
        view = self.backend.view1d
        args = []
        for arrays, shapes in ((inputs, self._inputs), (outputs, self._outputs)):
            for a, (parts, as_bytes) in zip(arrays, shapes, strict=True):
                args.extend(view(a, n, as_bytes, offset) for offset, n in parts)
        return tuple(args)

    def bound(self, inputs: Sequence[Any], outputs: Sequence[Any], stream: Any) -> Callable[[], None]:
        if self.empty:
            return _noop
        return functools.partial(self.backend.launch, stream, self.grid, self.kernel, self.args(inputs, outputs))


class CutileNodePlan(NodePlan):
    """One pointwise node: ``buffers`` by port."""

    workspace_bytes = 0

    def __init__(self, launch: KernelLaunch, in_ports: tuple[str, ...], out_ports: tuple[str, ...]) -> None:
        self.launch = launch
        self._in = in_ports
        self._out = out_ports

    def bind(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> Callable[[], None]:
        return self.launch.bound([buffers[p] for p in self._in], [buffers[p] for p in self._out], context.stream)

    def execute(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> None:
        self.bind(buffers, context)()


class CutileRegionPlan(RegionPlan):
    """A fused region: ``buffers`` by the uids of its entry and exit tensors."""

    workspace_bytes = 0

    def __init__(self, launch: KernelLaunch, entries: tuple[int, ...], exits: tuple[int, ...]) -> None:
        self.launch = launch
        self._entries = entries
        self._exits = exits

    def bind(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> Callable[[], None]:
        return self.launch.bound([buffers[u] for u in self._entries], [buffers[u] for u in self._exits], context.stream)

    def execute(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> None:
        self.bind(buffers, context)()
