"""The GPU reference (engine ids 4000-4999): float64 truth on the GPU, independent of the fast builders.

Every op, forward and backward, in its definitional form (im2col GEMMs for
convolution, two-pass norms and softmax, attention without online softmax),
computed in float64 (int64 for integer compute) and rounded once to each
output's dtype, as the CPU reference does. Its device code is a file of
obvious cuTile kernels (``kernels/tiles.py``: gather, elementwise, float64
GEMM, row reduction, round-and-scatter) and a float64 tensor-core GEMM in CuTe
DSL (``kernels/dmma_gemm.py``, used where CuTe DSL is installed), sharing
nothing with the cuTile and CuTe builders; ``arrays`` gives them a NumPy-like face and each op module
writes its formula with it. ``Executor("gpu-reference")`` runs graphs on it,
and validation uses it as its truth when a GPU is present
(docs/gpu_reference.md).
"""
