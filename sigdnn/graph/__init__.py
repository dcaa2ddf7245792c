"""The IR: Graph, Tensor, Node, op attribute classes, and their wire format."""

from sigdnn.graph.checks import check_graph
from sigdnn.graph.deserialize import deserialize
from sigdnn.graph.files import load
from sigdnn.graph.graph import SCHEMA_VERSION, Graph
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.graph.node import Node
from sigdnn.graph.serialize import serialize
from sigdnn.graph.tensor import Tensor

__all__ = [
    "DEFAULT_LIMITS",
    "SCHEMA_VERSION",
    "Graph",
    "Limits",
    "Node",
    "Tensor",
    "check_graph",
    "deserialize",
    "load",
    "serialize",
]
