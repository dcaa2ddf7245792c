"""Validation: random inputs, tolerances, comparison, reports."""

from sigdnn.accuracy.compare import Comparison, compare
from sigdnn.accuracy.inputs import random_array, random_inputs
from sigdnn.accuracy.tolerances import Tolerance, node_tolerance, output_tolerance
from sigdnn.validation.validate import NodeCheck, ValidationReport, compare_steps, validate

__all__ = [
    "Comparison",
    "NodeCheck",
    "Tolerance",
    "ValidationReport",
    "compare",
    "compare_steps",
    "node_tolerance",
    "output_tolerance",
    "random_array",
    "random_inputs",
    "validate",
]
