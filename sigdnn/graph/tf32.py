"""TF32 for a graph's float32 dot products: what torch's convs and ONNX Runtime's CUDA convs and GEMMs run by default.

sigdnn's float32 is exact: a node computing in float32 multiplies float32
operands exactly. TF32 rounds each operand to 10 mantissa bits (float16's
precision, float32's range) and sums the exact products in float32: at
least as accurate as float16 compute, so a dot-product node whose compute
dtype is 16-bit may run so (the cuTile matmul and conv builders do; the
node's tolerance is then its compute dtype's). ``allow_tf32`` gives that
compute dtype to every matmul and conv (fprop, dgrad, wgrad) that reads a
float32 operand and computes in float32; the other nodes keep theirs.
"""

from __future__ import annotations

from sigdnn.dtypes import DataType
from sigdnn.graph.graph import Graph

TF32_COMPUTE = DataType.FLOAT16  # the 16-bit compute dtype of TF32's precision (10 mantissa bits)


def takes_tf32(compute: DataType) -> bool:
    """Whether a dot product computing in ``compute`` may take float32 operands as TF32: a 16-bit compute dtype
    (the one rule the GPU builders share)."""
    return compute in (DataType.FLOAT16, DataType.BFLOAT16)


def allow_tf32(graph: Graph) -> list[str]:
    """Let ``graph``'s float32 dot products run as TF32 (compute dtype float16 on those nodes); their names."""
    changed = []
    for node in graph.nodes:
        if not node.op.dot_products or graph.compute_dtype_of(node) != DataType.FLOAT32:
            continue
        if any(graph.dtype_of(graph.tensors[uid]) == DataType.FLOAT32 for uid in node.op.inputs().values()):
            node.compute_dtype = TF32_COMPUTE
            changed.append(node.name)
    return changed
