"""sigdnn: execute serialized deep-learning operation graphs.

NumPy reference on the CPU, cuTile / CuTe DSL builders on the GPU, one
signature-keyed registry between them. GPU modules import lazily.
"""

__version__ = "0.2.0"

from typing import TYPE_CHECKING, Any

# Public names -> the module that defines them. Imported on first use
# (PEP 562), so ``import sigdnn.graph`` pulls in the graph layer alone and
# ``import sigdnn`` stays cheap.
_EXPORTS = {
    "DataType": "sigdnn.dtypes",
    **dict.fromkeys(
        (
            "ExecutionError",
            "GraphError",
            "GraphFrozenError",
            "NoPlanError",
            "NotSupported",
            "RegistryError",
            "SchemaError",
            "SigdnnError",
            "UsageError",
            "VariantPackError",
        ),
        "sigdnn.errors",
    ),
    "FileError": "sigdnn.io",
    "ExecutionPlan": "sigdnn.executor",
    "Executor": "sigdnn.executor",
    **dict.fromkeys(("Graph", "Limits", "Node", "Tensor", "deserialize", "serialize"), "sigdnn.graph"),
    "load": "sigdnn.importers",  # sigdnn.graph's load, with the foreign formats registered
    "Op": "sigdnn.graph.ops.base",
    "allow_tf32": "sigdnn.graph.tf32",
    **dict.fromkeys(
        (
            "BuildContext",
            "FusionBuilder",
            "NodePlan",
            "PlanBuilder",
            "Region",
            "RegionContext",
            "RegionPlan",
            "Registry",
            "register",
        ),
        "sigdnn.registry",
    ),
    "Device": "sigdnn.runtime",
    "ExecutionContext": "sigdnn.runtime",
    "SignatureKey": "sigdnn.signature_keys",
    "key_for": "sigdnn.signature_keys",
    "ValidationReport": "sigdnn.validation.checks",
    "validate": "sigdnn.validation.checks",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sigdnn' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:
    from sigdnn.dtypes import DataType
    from sigdnn.errors import (
        ExecutionError,
        GraphError,
        GraphFrozenError,
        NoPlanError,
        NotSupported,
        RegistryError,
        SchemaError,
        SigdnnError,
        UsageError,
        VariantPackError,
    )
    from sigdnn.executor import ExecutionPlan, Executor
    from sigdnn.graph import Graph, Limits, Node, Tensor, deserialize, load, serialize
    from sigdnn.graph.ops.base import Op
    from sigdnn.graph.tf32 import allow_tf32
    from sigdnn.io import FileError
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
    "FileError",
    "FusionBuilder",
    "Graph",
    "GraphError",
    "GraphFrozenError",
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
    "allow_tf32",
    "deserialize",
    "key_for",
    "load",
    "register",
    "serialize",
    "validate",
]
