"""Plan builders: reference (NumPy), cutile (cuTile) and cute (CuTe DSL)."""
