"""CuTe DSL builders (engine ids 3000-3999), one module per op family.

Kernels live in a ``kernels`` subpackage imported on first use, so this
package imports without nvidia-cutlass-dsl.
"""

from __future__ import annotations


def unavailable_reason() -> str | None:
    """Why the CuTe DSL builders cannot run here (no GPU, no DSL), else None."""
    from sigdnn.runtime.cuda import dsl_unavailable_reason

    return dsl_unavailable_reason("cutlass.cute", "nvidia-cutlass-dsl")
