"""Tolerances that follow the op chain, the dtypes and the reduction length.

Like hipDNN's dynamic tolerances: an output may differ from the float64
reference by its own rounding (a few ulps of its dtype) plus what the
producing chain accumulates, bounded in units of the compute dtype's epsilon
and growing with the reduction length.
"""

from __future__ import annotations

import math

import attrs
import ml_dtypes
import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.graph.graph import Graph
from sigdnn.graph.ops import ConvFprop, Matmul


def epsilon(dtype: DataType) -> float:
    if dtype.is_float:
        return float(ml_dtypes.finfo(dtype.numpy).eps)
    return 0.0


@attrs.frozen
class Tolerance:
    atol: float
    rtol: float
    exact: bool = False

    def __str__(self) -> str:
        return "exact" if self.exact else f"atol {self.atol:.3g} rtol {self.rtol:.3g}"


def reduction_length(graph: Graph, uid: int) -> int:
    """Terms summed into one element of the op that writes ``uid`` (1 for pointwise)."""
    for node in graph.nodes:
        if uid in node.op.outputs().values():
            op = node.op
            if isinstance(op, Matmul):
                return graph.tensors[op.a].dims[-1]
            if isinstance(op, ConvFprop):
                w = graph.tensors[op.w].dims
                return int(np.prod(w[1:]))
    return 1


def tolerance_for(graph: Graph, uid: int) -> Tolerance:
    """Tolerance for output ``uid``: its rounding plus the chain's accumulated error."""
    out = graph.dtype_of(graph.tensors[uid])
    if not out.is_float:
        return Tolerance(0.0, 0.0, exact=True)
    compute_eps = max((epsilon(graph.compute_dtype_of(n)) for n in graph.nodes), default=0.0)
    intermediate_eps = max(
        (epsilon(graph.dtype_of(t)) for t in graph.tensors.values() if t.is_virtual and graph.dtype_of(t).is_float),
        default=0.0,
    )
    depth = max(len(graph.nodes), 1)
    k = reduction_length(graph, uid)
    rtol = 2 * epsilon(out) + depth * (2 * intermediate_eps + compute_eps) + math.sqrt(k) * compute_eps * 4
    atol = rtol * (math.sqrt(k) if k > 1 else 1.0) * 1e-2
    return Tolerance(atol, rtol)
