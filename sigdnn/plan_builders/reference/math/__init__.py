"""The reference ops' math as pure functions on float64 (or int64) NumPy arrays.

Logical dims are cuDNN's (N, C, spatial...), whatever the memory layout:
inputs may be any strided views, and results are arrays of the logical
shape (possibly views in a layout chosen for speed). Nothing here knows
about graphs or dtypes' rounding rules: the op modules and reference
builders do that. Every computation is float64 (int64); the functions that
take a Sink (sink.py) also read float16 / float32 inputs, widening each block
exactly where they read it, and hand each finished block of their main
result to the Sink's store (the caller's one rounding) instead of returning
it. What each op computes: docs/ops.md.
"""

from __future__ import annotations

from sigdnn.plan_builders.reference.math.conv_backward import conv_dgrad, conv_wgrad
from sigdnn.plan_builders.reference.math.conv_forward import conv_forward
from sigdnn.plan_builders.reference.math.normalization import (
    batchnorm_backward,
    batchnorm_inference,
    batchnorm_train,
    layernorm,
    layernorm_backward,
    normalized_axes,
    rmsnorm,
    rmsnorm_backward,
)
from sigdnn.plan_builders.reference.math.pooling import pooling_backward, pooling_forward
from sigdnn.plan_builders.reference.math.reduction import reduced_axes, reduction
from sigdnn.plan_builders.reference.math.resample import resample, resample_backward
from sigdnn.plan_builders.reference.math.sdpa import sdpa, sdpa_backward
from sigdnn.plan_builders.reference.math.softmax import softmax

__all__ = [
    "batchnorm_backward",
    "batchnorm_inference",
    "batchnorm_train",
    "conv_dgrad",
    "conv_forward",
    "conv_wgrad",
    "layernorm",
    "layernorm_backward",
    "normalized_axes",
    "pooling_backward",
    "pooling_forward",
    "reduced_axes",
    "reduction",
    "resample",
    "resample_backward",
    "rmsnorm",
    "rmsnorm_backward",
    "sdpa",
    "sdpa_backward",
    "softmax",
]
