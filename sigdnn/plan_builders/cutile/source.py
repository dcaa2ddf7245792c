"""Kernel text that is not a pointwise KernelSpec: a named module source a backend compiles once.

The row, channel and reduction kernels (``row_kernel_source``, ``channel_kernel_source``,
``reduction_kernel_source``) are generated as text with their constants (tile shapes,
sizes, epsilon) written in; a ``KernelSource`` carries that text. Backends
cache kernels by it, so equal text means one compiled kernel.
"""

from __future__ import annotations

import hashlib

import attrs


@attrs.frozen
class KernelSource:
    prefix: str  # what kind of kernel (file and module names start with it)
    text: str  # a module defining ``kernel`` (without the line that binds ``ct``)

    @property
    def name(self) -> str:
        return f"{self.prefix}_{hashlib.sha1(self.text.encode()).hexdigest()[:16]}"

    def source(self) -> str:
        return self.text
