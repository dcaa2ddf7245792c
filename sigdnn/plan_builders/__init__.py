"""Plan builders: reference (NumPy), cutile (cuTile), cute (CuTe DSL) and gpu_reference (float64 truth on the GPU)."""
