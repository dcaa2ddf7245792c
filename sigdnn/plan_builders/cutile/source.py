"""Kernel text that is not a pointwise KernelSpec: a named module source a backend compiles once.

The row, channel and reduction kernels (``row_kernel_source``, ``channel_kernel_source``,
``reduction_kernel_source``) are generated as text with their constants (tile shapes,
sizes, epsilon) written in; a ``KernelSource`` carries that text. Backends
cache kernels by it, so equal text means one compiled kernel. The literal
kernels (``_*_kernels.py``: real Python a reader and a linter see) are read
by ``literal``: the file's text below ``MARKER``, with one kernel bound.
"""

from __future__ import annotations

import hashlib
from importlib import resources

import attrs

MARKER = "# ---- kernel module: everything below this line is the kernels' text ----"


@attrs.frozen
class KernelSource:
    prefix: str  # what kind of kernel (file and module names start with it)
    text: str  # a module defining ``kernel`` (without the line that binds ``ct``)

    @property
    def name(self) -> str:
        return f"{self.prefix}_{hashlib.sha1(self.text.encode()).hexdigest()[:16]}"

    def source(self) -> str:
        return self.text


def literal(file: str, kernel: str, prefix: str) -> KernelSource:
    """The literal kernels of ``file`` (in this package, below ``MARKER``) with ``kernel`` bound to the one named."""
    text = resources.files("sigdnn.plan_builders.cutile").joinpath(file).read_text()
    return KernelSource(prefix, text.split(MARKER, 1)[1] + f"\nkernel = {kernel}\n")
