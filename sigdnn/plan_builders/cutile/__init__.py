"""cuTile builders (engine ids 2000-2999).

Importing this package imports no GPU code: ``cuda.tile`` loads on the first
launch, and ``available()`` reports why a builder cannot run on this machine.
"""

from __future__ import annotations

from sigdnn.plan_builders.cutile.pointwise import CutilePointwiseBuilder
from sigdnn.registry.contracts import PlanBuilder


def builders() -> list[PlanBuilder]:
    return [CutilePointwiseBuilder()]
