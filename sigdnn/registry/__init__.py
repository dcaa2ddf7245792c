"""The registry: builders by op kind, engine ids, ranking, regions."""

from sigdnn.registry.contracts import (
    BuildContext,
    FusionBuilder,
    NodePlan,
    PlanBuilder,
    RegionContext,
    RegionPlan,
    StepPlan,
)
from sigdnn.registry.regions import Dataflow, Region, grow_regions, make_region
from sigdnn.registry.registry import DEFAULT_REGISTRY, Registry, register

__all__ = [
    "DEFAULT_REGISTRY",
    "BuildContext",
    "Dataflow",
    "FusionBuilder",
    "NodePlan",
    "PlanBuilder",
    "Region",
    "RegionContext",
    "RegionPlan",
    "Registry",
    "StepPlan",
    "grow_regions",
    "make_region",
    "register",
]
