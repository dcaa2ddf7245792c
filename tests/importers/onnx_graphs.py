"""Hand-built ONNX models for the importer's tests (onnx's helper API, no torch)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper


def one_input_model(nodes: list, known: dict[str, np.ndarray], x_shape: tuple[int, ...]) -> bytes:
    """Opset 17: float32 input "x" of ``x_shape``, output "y", the ``known`` arrays as initializers."""
    inits = [numpy_helper.from_array(v, n) for n, v in known.items()]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    g = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
