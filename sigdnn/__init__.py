"""sigdnn: execute serialized deep-learning operation graphs.

NumPy reference on the CPU, cuTile / CuTe DSL builders on the GPU, one
signature-keyed registry between them. GPU modules import lazily.
"""

__version__ = "0.2.0"

from sigdnn.dtypes import DataType
from sigdnn.errors import (
    ExecutionError,
    GraphError,
    NoPlanError,
    NotSupported,
    RegistryError,
    SchemaError,
    SigdnnError,
    UsageError,
    VariantPackError,
)
from sigdnn.executor import ExecutionPlan, Executor
from sigdnn.graph import Graph, Limits, Node, Tensor, deserialize, serialize
from sigdnn.graph.ops.base import Op
from sigdnn.registry import (
    BuildContext,
    FusionBuilder,
    NodePlan,
    PlanBuilder,
    Region,
    RegionContext,
    RegionPlan,
    Registry,
    register,
)
from sigdnn.runtime import Device, ExecutionContext
from sigdnn.signature_keys import SignatureKey, key_for
from sigdnn.validation import ValidationReport, validate

__all__ = [
    "BuildContext",
    "DataType",
    "Device",
    "ExecutionContext",
    "ExecutionError",
    "ExecutionPlan",
    "Executor",
    "FusionBuilder",
    "Graph",
    "GraphError",
    "Limits",
    "NoPlanError",
    "Node",
    "NodePlan",
    "NotSupported",
    "Op",
    "PlanBuilder",
    "Region",
    "RegionContext",
    "RegionPlan",
    "Registry",
    "RegistryError",
    "SchemaError",
    "SigdnnError",
    "SignatureKey",
    "Tensor",
    "UsageError",
    "ValidationReport",
    "VariantPackError",
    "__version__",
    "deserialize",
    "key_for",
    "register",
    "serialize",
    "validate",
]
