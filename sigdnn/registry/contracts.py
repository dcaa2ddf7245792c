"""PlanBuilder and NodePlan: the contract between the executor and a backend.

A builder says which keys it serves, declines a node by raising NotSupported
from ``check`` (any other exception is a bug and propagates), and builds a
NodePlan that runs one node on the buffers the executor hands it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any, ClassVar

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor
from sigdnn.signature_keys import SignatureKey


@attrs.frozen
class Device:
    """Where plans run: ``kind`` is "cpu" or "gpu"; ``context`` the GPU context."""

    kind: str = "cpu"
    context: Any = None


CPU = Device("cpu")


@attrs.define
class BuildContext:
    """What a builder gets besides the node: the key, tensors and the device."""

    key: SignatureKey
    device: Device
    tensors: dict[str, Tensor]  # port -> tensor, dtypes resolved via the graph
    graph: Graph


class NodePlan(ABC):
    """A node ready to run; built once at prepare, executed many times."""

    workspace_bytes: int = 0

    @abstractmethod
    def execute(self, buffers: Mapping[str, Any], stream: Any = None) -> None:
        """Run the node: read input ports, write output ports (port -> array)."""


class PlanBuilder(ABC):
    """Builds NodePlans for the keys it serves on one backend."""

    name: ClassVar[str]
    engine_id: ClassVar[int]
    backend: ClassVar[str]  # "reference", "cutile", "cute" or a plugin's
    device: ClassVar[str] = "cpu"  # "cpu" or "gpu": which executor backend uses it
    key_type: ClassVar[type[SignatureKey]]
    priority: ClassVar[int] = 0  # higher ranks first among builders of one key

    def available(self) -> str | None:
        """None when the builder can run here, else why not (missing DSL, no GPU)."""
        return None

    def serves(self, key: SignatureKey) -> bool:
        """Whether ``key`` is one this builder is written for."""
        return isinstance(key, self.key_type)

    def check(self, node: Node, graph: Graph, device: Device) -> None:
        """Raise NotSupported(reason) to decline this node (dims, strides, ...)."""

    @abstractmethod
    def build(self, node: Node, graph: Graph, ctx: BuildContext) -> NodePlan:
        """Make the plan for a node ``check`` accepted."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} #{self.engine_id} ({self.backend})>"
