"""ONNX op handlers, one module per group of ops; importing this package registers them all."""

from sigdnn.importers.onnx_ops import attention, conv, elementwise, linear, movement, norm, pool_reduce, resize  # noqa: F401
