"""The registry: builders by signature key, engine ids, ranking."""

from sigdnn.registry.contracts import CPU, BuildContext, Device, NodePlan, PlanBuilder
from sigdnn.registry.registry import DEFAULT_REGISTRY, Registry, register

__all__ = ["CPU", "DEFAULT_REGISTRY", "BuildContext", "Device", "NodePlan", "PlanBuilder", "Registry", "register"]
