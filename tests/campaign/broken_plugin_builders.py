"""A plugin with a deliberately broken CPU builder (and a correct one), for the campaign tests.

The campaign tests copy this file into a temporary site folder beside a
``.dist-info`` whose ``entry_points.txt`` names ``builders`` under the
``sigdnn.plan_builders`` group, so the registry loads it as it would an
installed package, in the test process and in every Ray worker.

Planted bugs of ``broken.pointwise`` (everything else is exact: float64,
rounded once, as the reference):
- ``add`` adds 1 to every element whose last-dim index is >= 8, so a case
  fails exactly when the last dim is > 8 (smallest failing: last dim 9,
  every other dim 1);
- ``mul`` adds 1 to the last element when the element count is odd and
  >= 3 (smallest failing rank-2 shape: (1, 3)).

``crash-once`` beside this file makes the plugin kill its worker process
(``os._exit``) the first time it runs the shape the file names, as a
killed machine would; it deletes the file first, so the retry succeeds.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from sigdnn.dtypes import round_to
from sigdnn.errors import NotSupported
from sigdnn.registry import NodePlan, PlanBuilder

CRASH_MARKER = Path(__file__).with_name("crash-once")
MODES = ("add", "mul")
FLOATS = ("FLOAT32", "FLOAT16", "BFLOAT16")


def add_fails(shape: tuple[int, ...]) -> bool:
    return shape[-1] > 8


def mul_fails(shape: tuple[int, ...]) -> bool:
    size = math.prod(shape)
    return size % 2 == 1 and size >= 3


class PointwisePlan(NodePlan):
    def __init__(self, mode: str, dtype: Any, broken: bool) -> None:
        self.mode, self.dtype, self.broken = mode, dtype, broken

    def execute(self, buffers: Any, context: Any = None) -> None:
        a, b = (np.asarray(buffers[p]).astype(np.float64) for p in ("in_0", "in_1"))
        _crash_once(a.shape)
        y = a + b if self.mode == "add" else a * b
        if self.broken and self.mode == "add":
            y[..., 8:] += 1.0
        if self.broken and self.mode == "mul" and mul_fails(y.shape):
            y.reshape(-1)[-1] += 1.0
        buffers["out_0"][...] = round_to(y, self.dtype)


def _crash_once(shape: tuple[int, ...]) -> None:
    try:
        wanted = CRASH_MARKER.read_text().strip()
    except FileNotFoundError:
        return
    if wanted == "x".join(map(str, shape)):
        CRASH_MARKER.unlink()
        os._exit(17)


class _Pointwise(PlanBuilder):
    library: ClassVar[str] = "testplugin"
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)
    broken: ClassVar[bool]

    def serves(self, key: Any) -> bool:
        return key.op == "pointwise" and key.trait("mode") in MODES

    def check(self, node: Any, graph: Any, device: Any) -> None:
        for port, uid in node.op.ports().items():
            dtype = graph.dtype_of(graph.tensors[uid])
            if dtype.name not in FLOATS:
                raise NotSupported(f"port {port} is {dtype}")
            if graph.tensors[uid].dims != graph.tensors[node.op.out_0].dims:
                raise NotSupported("no broadcasting")

    def build(self, node: Any, graph: Any, context: Any) -> NodePlan:
        return PointwisePlan(node.op.mode, graph.dtype_of(graph.tensors[node.op.out_0]), self.broken)


class BrokenPointwise(_Pointwise):
    name: ClassVar[str] = "broken.pointwise"
    engine_id: ClassVar[int] = 30100
    broken = True


class GoodPointwise(_Pointwise):
    name: ClassVar[str] = "good.pointwise"
    engine_id: ClassVar[int] = 30101
    broken = False


def builders() -> list[PlanBuilder]:
    return [BrokenPointwise(), GoodPointwise()]
