"""NumPy reference builders: the CPU ground truth, one module per op family."""

from __future__ import annotations

from sigdnn.plan_builders.reference.conv_fprop import ReferenceConvFprop
from sigdnn.plan_builders.reference.matmul import ReferenceMatmul
from sigdnn.plan_builders.reference.pointwise import ReferencePointwise
from sigdnn.registry.contracts import PlanBuilder


def builders() -> list[PlanBuilder]:
    return [ReferencePointwise(), ReferenceMatmul(), ReferenceConvFprop()]
