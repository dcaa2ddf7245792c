"""Op attribute classes, one module per op, keyed by their wire union member."""

from __future__ import annotations

from sigdnn.graph.ops.base import Op
from sigdnn.graph.ops.conv_fprop import ConvFprop
from sigdnn.graph.ops.matmul import Matmul
from sigdnn.graph.ops.pointwise import MODES, Pointwise
from sigdnn.schemas.NodeAttributes import NodeAttributes

OPS: tuple[type[Op], ...] = (Pointwise, Matmul, ConvFprop)
BY_WIRE: dict[int, type[Op]] = {getattr(NodeAttributes, op.table): op for op in OPS}
WIRE_OF: dict[type[Op], int] = {op: member for member, op in BY_WIRE.items()}

__all__ = ["BY_WIRE", "MODES", "OPS", "WIRE_OF", "ConvFprop", "Matmul", "Op", "Pointwise"]
