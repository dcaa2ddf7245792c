"""How many batch slices an im2col GEMM runs in, so its im2col matrix fits a bounded workspace.

The im2col matrix of a conv is R*S times x's size: ResNet-50's 3-channel
stem at batch 64 needs 233 MiB, more than the whole rest of the inference
plan's memory. Images are independent rows of that matrix, so the im2col
builders (``conv.py`` fprop, ``conv_wgrad.py`` wgrad) run it batch slice
by batch slice through one slice-sized workspace: the same kernels, one
more launch pair per slice, pointers advanced by a slice.
"""

from __future__ import annotations

import math

IM2COL_BUDGET = 32 << 20  # bytes of im2col matrix one slice may hold


def batch_slices(images: int, bytes_per_image: int, divides: int = 0) -> int:
    """The fewest slices (a divisor of ``images``, and of ``divides`` when given) whose part of the im2col
    matrix fits IM2COL_BUDGET; when none fits, the most such slices (the least memory there is)."""
    most = math.gcd(images, divides) if divides else images
    for slices in range(1, most + 1):
        if most % slices == 0 and images // slices * bytes_per_image <= IM2COL_BUDGET:
            return slices
    return most
