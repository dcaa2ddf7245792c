"""NumPy reference builders: the CPU ground truth, one module per op family."""
