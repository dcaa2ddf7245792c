"""Validation: random inputs, tolerances, comparison, reports."""

from sigdnn.validation.compare import Comparison, compare
from sigdnn.validation.inputs import random_array, random_inputs
from sigdnn.validation.tolerances import Tolerance, tolerance_for
from sigdnn.validation.validate import ValidationReport, validate

__all__ = [
    "Comparison",
    "Tolerance",
    "ValidationReport",
    "compare",
    "random_array",
    "random_inputs",
    "tolerance_for",
    "validate",
]
