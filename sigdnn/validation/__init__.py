"""Validation: random inputs, tolerances, comparison, reports.

The names below load on first use (PEP 562): the command line imports ``sigdnn.validation.truth`` for its
options, and a `sigdnn run` should not pay for the comparison and report modules it never calls.
"""

from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "Comparison": "sigdnn.accuracy.compare",
    "compare": "sigdnn.accuracy.compare",
    "random_array": "sigdnn.accuracy.inputs",
    "random_inputs": "sigdnn.accuracy.inputs",
    "initialized_inputs": "sigdnn.accuracy.inputs",
    "Tolerance": "sigdnn.accuracy.tolerances",
    "node_tolerance": "sigdnn.accuracy.tolerances",
    "output_tolerance": "sigdnn.accuracy.tolerances",
    **dict.fromkeys(("NodeCheck", "ValidationReport", "compare_steps", "validate"), "sigdnn.validation.checks"),
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sigdnn.validation' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:
    from sigdnn.accuracy.compare import Comparison, compare
    from sigdnn.accuracy.inputs import initialized_inputs, random_array, random_inputs
    from sigdnn.accuracy.tolerances import Tolerance, node_tolerance, output_tolerance
    from sigdnn.validation.checks import NodeCheck, ValidationReport, compare_steps, validate

__all__ = [
    "Comparison",
    "NodeCheck",
    "Tolerance",
    "ValidationReport",
    "compare",
    "compare_steps",
    "initialized_inputs",
    "node_tolerance",
    "output_tolerance",
    "random_array",
    "random_inputs",
    "validate",
]
