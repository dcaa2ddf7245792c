"""Step plans of one or more generated kernels run back to back (row, channel and reduction ops).

A node such as batchnorm is several launches (partial sums, a finalize,
the elementwise pass) sharing scratch in the step's workspace. Every
argument is described when the plan is built (``Arg``: which buffer or which
slice of the workspace, seen with which shape and strides); ``bind`` makes
the views once and returns a callable that only launches, as the pointwise
plans do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.graph.layout import packed_like, packed_strides
from sigdnn.plan_builders.cutile.source import KernelSource
from sigdnn.registry.contracts import NodePlan
from sigdnn.runtime.device import ExecutionContext

WORKSPACE = "@workspace"  # Arg.buffer naming the step's workspace instead of a port


@attrs.frozen
class Arg:
    """A kernel argument: a view of a port's buffer (or of the workspace, as float32) with element strides."""

    buffer: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    offset: int = 0  # elements of the view's dtype from the buffer's start
    dtype: str = "float32"  # a workspace view's, a DataType value (a port's view takes its buffer's dtype)

    def view(self, backend: Any, buffers: Mapping[str, Any], workspace: Any) -> Any:
        if self.buffer == WORKSPACE:
            return backend.view(workspace, self.shape, self.strides, DataType(self.dtype).numpy, self.offset)
        array = buffers[self.buffer]
        return backend.view(array, self.shape, self.strides, array.dtype, self.offset)


@attrs.frozen
class Launch:
    source: KernelSource
    grid: tuple[int, ...]
    args: tuple[Arg, ...]
    constants: tuple[int, ...] = ()  # passed after the views: a literal kernel's sizes (ct.Constant or scalars)


class Workspace:
    """Scratch handed out in 256-byte aligned slices (the step's ``workspace_bytes``)."""

    def __init__(self) -> None:
        self.nbytes = 0

    def take(self, shape: tuple[int, ...], dtype: str = "float32", like: tuple[int, ...] | None = None) -> Arg:
        """A packed view: row-major, or in the axis order of the strides ``like`` (so that lanes walking a
        tensor of that layout touch neighbouring elements of this one too)."""
        itemsize = DataType(dtype).itemsize
        offset = self.nbytes // itemsize
        size = int(np.prod(shape)) if shape else 1
        self.nbytes += -(-size * itemsize // 256) * 256
        strides = packed_strides(shape) if like is None else packed_like(shape, like)
        return Arg(WORKSPACE, shape, strides, offset, dtype)


def _noop() -> None:
    pass


class LaunchesPlan(NodePlan):
    """Launches in order on the step's stream; ``buffers`` by port."""

    def __init__(self, launches: Sequence[Launch], backend: Any, workspace_bytes: int = 0) -> None:
        self.launches = tuple(launches)
        self.backend = backend
        self.kernels = [backend.kernel(launch.source) for launch in self.launches]
        self.workspace_bytes = workspace_bytes

    def bind(self, buffers: Mapping[str, Any], context: ExecutionContext) -> Callable[[], None]:
        if not self.launches:
            return _noop
        backend, stream = self.backend, context.stream
        calls = [
            (
                kernel,
                launch.grid,
                (*(a.view(backend, buffers, context.workspace) for a in launch.args), *launch.constants),
            )
            for kernel, launch in zip(self.kernels, self.launches, strict=True)
        ]

        def run() -> None:
            for kernel, grid, args in calls:
                backend.launch(stream, grid, kernel, args)

        return run

    def execute(self, buffers: Mapping[str, Any], context: ExecutionContext) -> None:
        self.bind(buffers, context)()
