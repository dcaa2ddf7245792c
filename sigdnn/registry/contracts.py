"""The contract between the executor and a builder: PlanBuilder, FusionBuilder, step plans.

A builder says which ops it serves, declines a node by raising NotSupported
from ``check`` (any other exception is a bug and propagates), and builds a
NodePlan that runs one node. A FusionBuilder also claims regions (connected,
convex sets of nodes) and builds a RegionPlan that runs each as one step.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import attrs

from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.runtime.device import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey

if TYPE_CHECKING:
    from sigdnn.registry.regions import Region


@attrs.frozen
class BuildContext:
    """What a builder gets besides the node: its key, the device and the graph."""

    key: SignatureKey
    device: Device
    graph: Graph
    config: str | None = None  # a configuration label the builder offered (measured choice); None: its default


@attrs.frozen
class RegionContext:
    """What a fusion builder gets besides the region: each node's key, the device and the graph."""

    keys: tuple[SignatureKey, ...]
    device: Device
    graph: Graph
    config: str | None = None  # a configuration label the builder offered (measured choice); None: its default


class StepPlan(ABC):
    """One step ready to run; built once at prepare, executed many times.

    ``workspace_bytes`` is scratch the step wants while it runs: the
    executor allocates one workspace of the largest any step asks for and
    passes it in the ExecutionContext.
    """

    workspace_bytes: int = 0

    @abstractmethod
    def execute(self, buffers: Mapping[Any, Any], context: ExecutionContext) -> None:
        """Run the step on its buffers (see the subclasses for their keys)."""


class NodePlan(StepPlan):
    """Runs one node: ``buffers`` maps the node's ports to arrays (inputs read, outputs written)."""


class RegionPlan(StepPlan):
    """Runs a region: ``buffers`` maps the uids of its entry and exit tensors to arrays.

    Region-internal tensors get no buffer: the plan keeps them to itself.
    """


class PlanBuilder(ABC):
    """Builds NodePlans for the ops it serves, with one library, on one device kind."""

    name: ClassVar[str]
    engine_id: ClassVar[int]
    library: ClassVar[str]  # what its kernels are written with: "reference", "cutile", "cute" or a plugin's
    device: ClassVar[str] = "cpu"  # "cpu" or "gpu": the kind of device its plans run on
    ops: ClassVar[tuple[str, ...]] = ()  # op kinds whose keys it serves (the registry indexes by them)
    priority: ClassVar[int] = 0  # higher ranks first among builders of one key

    def available(self) -> str | None:
        """None when the builder can run here, else why not (missing DSL, no GPU)."""
        return None

    def serves(self, key: SignatureKey) -> bool:
        """Whether ``key`` is one this builder is written for (narrow it by traits or dtypes)."""
        return key.op in self.ops

    def check(self, node: Node, graph: Graph, device: Device) -> None:
        """Raise NotSupported(reason) to decline this node (dims, strides, the device's abilities...)."""

    @abstractmethod
    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        """Make the plan for a node ``check`` accepted."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} #{self.engine_id} ({self.library})>"


class FusionBuilder(PlanBuilder):
    """A builder that claims regions of several nodes and runs each as one step.

    ``claim`` sees the whole graph and returns the regions it wants (use
    ``sigdnn.registry.regions.make_region`` / ``grow_regions``); the
    executor commits those that do not overlap an earlier claim and builds
    them with ``build_region``. A fusion builder may also serve single
    nodes through ``ops`` / ``build``; by default it serves none.
    """

    @abstractmethod
    def claim(self, graph: Graph, order: list[int], device: Device) -> list[Region]:
        """Regions this builder would run, best first (``order`` is a valid execution order)."""

    @abstractmethod
    def build_region(self, region: Region, graph: Graph, context: RegionContext) -> RegionPlan:
        """Make the plan for a claimed region."""

    def build(self, node: Node, graph: Graph, context: BuildContext) -> NodePlan:
        raise NotSupported(f"{self.name} builds regions, not single nodes")
