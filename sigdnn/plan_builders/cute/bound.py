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
