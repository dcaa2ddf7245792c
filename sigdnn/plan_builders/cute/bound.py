"""CuTe plans bind to addresses: operand checks run once per binding, a launch passes only pointers.

Every CuTe specialization is launched through its compiled handle with raw
device addresses and a stream. ``bind`` checks the operands and fixes those
addresses in a closure, so the GPU executor's bound plans (and the CUDA
graphs it records from them) repeat only the launches; ``execute`` is a
bind used once.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any

from sigdnn.errors import VariantPackError
from sigdnn.runtime.device import ExecutionContext


def check_aligned(where: str, **operands: Any) -> None:
    """VariantPackError naming every operand whose address is not 16-byte aligned (TMA needs it)."""
    misaligned = [name for name, array in operands.items() if array.ptr & 15]
    if misaligned:
        raise VariantPackError(f"{where}: {', '.join(misaligned)} not 16-byte aligned (TMA needs it)")


def in_order(*launches: Callable[[], None]) -> Callable[[], None]:
    """One launch, or several enqueued one after another on their stream."""
    if len(launches) == 1:
        return launches[0]
    return functools.partial(_run_all, launches)


def _run_all(launches: tuple[Callable[[], None], ...]) -> None:
    for launch in launches:
        launch()


class BindsLaunches:
    """Mixin for CuTe plans: ``bind`` is theirs, ``execute`` binds and launches at once."""

    def bind(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> Callable[[], None]:
        raise NotImplementedError

    def execute(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> None:
        self.bind(buffers, context)()


class GemmLaunchPlan(BindsLaunches):
    """One compiled GEMM launch (a matmul's or an implicit conv's) over three operands and an optional bias.

    ``operands`` name the three buffers as the alignment check names them
    (``a, b, c`` or ``x, w, y``) and say where each is: a port (a node plan)
    or a uid (a region plan); ``bias`` likewise, or None. The launch takes
    the three addresses, the stream, the bias address (0 without one) and
    whatever ``extra_arguments`` adds; ``config`` is the launch's (what
    ``describe`` and the benchmarks print).
    """

    workspace_bytes = 0

    def __init__(self, launch: Any, where: str, operands: Mapping[str, Any], bias: Any = None) -> None:
        self._launch = launch
        self._where = where
        self._operands = dict(operands)
        self._bias = bias

    @property
    def config(self) -> Any:
        return self._launch.config

    def extra_arguments(self, buffers: Mapping[Any, Any]) -> tuple[Any, ...]:
        """What the launch takes after the bias address (nothing, unless a subclass says)."""
        return ()

    def bind(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> Callable[[], None]:
        arrays = {name: buffers[key] for name, key in self._operands.items()}
        check_aligned(self._where, **arrays)
        bias = None if self._bias is None else buffers.get(self._bias)
        return functools.partial(
            self._launch,
            *(array.ptr for array in arrays.values()),
            context.stream,
            0 if bias is None else bias.ptr,
            *self.extra_arguments(buffers),
        )
