"""CuTe DSL builders (engine ids 3000-3999), one module per op family.

Kernels live in a ``kernels`` subpackage imported on first use, so this
package imports without nvidia-cutlass-dsl.
"""
