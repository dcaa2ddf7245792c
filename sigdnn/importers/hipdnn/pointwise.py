"""hipDNN PointwiseAttributes -> sigdnn pointwise (the modes by their published values)."""

from __future__ import annotations

from sigdnn.graph.ops.pointwise import PARAMS
from sigdnn.importers.hipdnn.mapping import NodeMapping, maps

# pointwise_attributes.fbs: PointwiseMode (value -> sigdnn mode); MAX_OP / MIN_OP are max / min
POINTWISE_MODES = {
    1: "abs",
    2: "add",
    3: "add_square",
    4: "binary_select",
    5: "ceil",
    6: "cmp_eq",
    7: "cmp_ge",
    8: "cmp_gt",
    9: "cmp_le",
    10: "cmp_lt",
    11: "cmp_neq",
    12: "div",
    13: "elu_bwd",
    14: "elu_fwd",
    15: "erf",
    16: "exp",
    17: "floor",
    18: "gelu_approx_tanh_bwd",
    19: "gelu_approx_tanh_fwd",
    20: "gelu_bwd",
    21: "gelu_fwd",
    22: "gen_index",
    23: "identity",
    24: "log",
    25: "logical_and",
    26: "logical_not",
    27: "logical_or",
    28: "max",
    29: "min",
    30: "mul",
    31: "neg",
    32: "reciprocal",
    33: "relu_bwd",
    34: "relu_fwd",
    35: "rsqrt",
    36: "sigmoid_bwd",
    37: "sigmoid_fwd",
    38: "sin",
    39: "softplus_bwd",
    40: "softplus_fwd",
    41: "sqrt",
    42: "sub",
    43: "swish_bwd",
    44: "swish_fwd",
    45: "tan",
    46: "tanh_bwd",
    47: "tanh_fwd",
}


@maps("PointwiseAttributes")
def _pointwise(m: NodeMapping) -> None:
    op = m.get("operation")
    mode = POINTWISE_MODES.get(op)
    if mode is None:
        raise m.refuse(f"unknown or unset pointwise operation {op}")
    params = {p: m.get(p) for p in PARAMS}
    ports = dict(zip(("in_0", "in_1", "in_2", "out_0"), m.get("in_0", "in_1", "in_2", "out_0")))
    m.add("pointwise", mode=mode, **ports, **{k: v for k, v in params.items() if v is not None})
