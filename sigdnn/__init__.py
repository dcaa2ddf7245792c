"""sigdnn: execute serialized deep-learning operation graphs.

NumPy reference on the CPU, cuTile / CuTe DSL builders on the GPU, one
signature-keyed registry between them. GPU modules import lazily.
"""

from sigdnn.dtypes import DataType
from sigdnn.errors import (
    ExecutionError,
    GraphError,
    NoPlanError,
    NotSupported,
    RegistryError,
    SchemaError,
    SigdnnError,
    VariantPackError,
)
from sigdnn.executor import ExecutionPlan, Executor
from sigdnn.graph import Graph, Limits, Node, Tensor, deserialize, serialize
from sigdnn.registry import NodePlan, PlanBuilder, Registry, register
from sigdnn.validation import ValidationReport, validate

__version__ = "0.1.0"

__all__ = [
    "DataType",
    "ExecutionError",
    "ExecutionPlan",
    "Executor",
    "Graph",
    "GraphError",
    "Limits",
    "NoPlanError",
    "Node",
    "NodePlan",
    "NotSupported",
    "PlanBuilder",
    "Registry",
    "RegistryError",
    "SchemaError",
    "SigdnnError",
    "Tensor",
    "ValidationReport",
    "VariantPackError",
    "__version__",
    "deserialize",
    "register",
    "serialize",
    "validate",
]
