"""Tolerances: per node from its dtypes and reduction length; per step and per output from the chain.

Step by step (what ``validate`` judges): both backends get the same inputs,
so a node's results may differ by the output's rounding (one ulp) plus the
device's compute-dtype error: a few ulps of the compute dtype for pointwise
math, and for a reduction of length K a probabilistic accumulation bound
(Higham & Mary) of ~sqrt(K) ulps of the compute dtype times sum(|terms|),
as hipDNN's dynamic tolerances grow with the reduction length; an op
whose compute dtype rounds only its products' operands, summing in float32
(the gated delta rules), grows it at float32's epsilon and adds a few ulps
of the compute dtype for the operands. A fused
region's exits add the error terms of the region's other nodes: validate
carries each inner node's error at the inner node's own magnitude through
the region to the exit (where the region cancels, that is far more than
the same rtol times the exit's small value); without those carried errors
their summed rtol times |exit| stands in. A dot product over fp8 operands
(matmul, conv) also allows the fp8 tensor-core accumulator's share of
sum(|terms|) (``FP8_ACCUMULATOR_EPS``). An output averaging an input with
probability weights (attention's o) allows half an ulp of that input's
dtype per weight, which a device may round them to (flash attention does);
an output whose products a device may take from intermediates rounded to
an input's dtype (attention's gradients) allows half an ulp of it normwise;
an output made from a softmax of scores (attention's, forward and
backward) allows what the scores' own accumulation error does to it, which
grows with the logits' magnitude: measured by moving q and k
(``step_reference._score_errors``).

End to end (reported beside it), errors compound along the chain, so the
output tolerance adds a term per node; it is loose by nature, which is why
the verdict is taken step by step.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import attrs
import numpy as np

from sigdnn.dtypes import DataType, is_ml_dtypes
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node

POINTWISE_COMPUTE_ULPS = 4  # f32 transcendentals on GPUs are within a few ulps
REDUCTION_ULPS_PER_SQRT_K = 4
# An op with float32 sums (``Op.float32_sums``: the gated delta rules) rounds only its products' operands to the
# compute dtype; its chunked form chains a few such products (the WY inverse, the state, the output), so a result
# may be off by a few ulps of the compute dtype of sum|terms|, however long the sequence. The emulated kernels
# (operands rounded as the GPU's, beta = 1 and no decay the worst; up to 8,192 tokens) reach at most 1 ulp, an
# H100 0.3 at 4,101 tokens (docs/experiments.md, validation's bound at bf16 products).
PRODUCT_OPERAND_ULPS = 4
# Hopper's fp8 tensor-core instructions add the products of their K slice with about 14 significant bits, not
# float32's 24, however often partial sums are promoted to float32 (the DeepSeek-V3 report, 3.3.2; on the H200
# cuBLAS and sigdnn's CuTe GEMM reached 2**-13.2 * sum|a b| at K = 64: docs/experiments.md, fp8 accumulation).
# A dot product over fp8 operands may therefore be off by this share of sum|terms| besides the float32 bound. It
# does not grow with K: an accumulation never promoted to float32 ("fast accumulation") can exceed it at large K
# (3.75e-4 * sum|a b| at K = 8192 on the H200).
FP8_ACCUMULATOR_EPS = 2.0**-13
FP8_ACCUMULATOR_ULPS = 2
FP8 = (DataType.FP8_E4M3, DataType.FP8_E5M2)


def finfo(dtype: np.dtype) -> Any:
    """np.finfo, or ml_dtypes.finfo for its own types (imported here: it costs 0.3-1.5 s, see sigdnn.dtypes)."""
    if not is_ml_dtypes(dtype):
        return np.finfo(dtype)
    import ml_dtypes

    return ml_dtypes.finfo(dtype)


def epsilon(dtype: DataType) -> float:
    return float(finfo(dtype.numpy).eps) if dtype.is_float else 0.0


def tiniest(dtype: DataType) -> float:
    return float(finfo(dtype.numpy).smallest_subnormal) if dtype.is_float else 0.0


@attrs.frozen
class Tolerance:
    """|got - want| <= atol + rtol * |want| (+ ``reduction`` * sum of |terms| for reductions)
    (+ the error carried from a region's inner nodes, whose summed rtol is ``inner``)
    (+ for an output of a softmax of scores, ``Op.score_operands``, how far it moves when the scores' operands move
    relatively by ``scores`` with random signs: measured on the data, so added with the carried error)."""

    atol: float
    rtol: float
    exact: bool = False
    reduction: float = 0.0
    inner: float = 0.0
    scores: float = 0.0

    def __str__(self) -> str:
        if self.exact:
            return "exact"
        extra = f" + {self.reduction:.3g}*sum|terms|" if self.reduction else ""
        scored = f" + scores' rounding ({self.scores:.3g})" if self.scores else ""
        region = f" + inner nodes' error (rtol {self.inner:.3g})" if self.inner else ""
        return f"atol {self.atol:.3g} rtol {self.rtol:.3g}{extra}{scored}{region}"


def reduction_length(graph: Graph, node: Node, uid: int) -> int:
    """Terms accumulated into one element of output ``uid`` (1 for pointwise), as the op declares."""
    port = next(p for p, u in node.op.outputs().items() if u == uid)
    tensors = {p: graph.tensors[u] for p, u in node.op.ports().items()}
    return node.op.reduction_length(tensors, port)


def node_tolerance(graph: Graph, node: Node, uid: int) -> Tolerance:
    """How far a device's result for one node may be from the reference's, on the same inputs."""
    out = graph.dtype_of(graph.tensors[uid])
    if not out.is_float:
        return Tolerance(0.0, 0.0, exact=True)
    compute = graph.compute_dtype_of(node)
    k = reduction_length(graph, node, uid)
    rtol = epsilon(out) + POINTWISE_COMPUTE_ULPS * epsilon(compute)
    summed = min(epsilon(compute), epsilon(DataType.FLOAT32)) if node.op.float32_sums else epsilon(compute)
    reduction = REDUCTION_ULPS_PER_SQRT_K * math.sqrt(k) * summed if k > 1 else 0.0
    if node.op.float32_sums:
        reduction += PRODUCT_OPERAND_ULPS * epsilon(compute)
    if (
        k > 1
        and node.op.dot_products
        and any(graph.dtype_of(graph.tensors[u]) in FP8 for u in node.op.inputs().values())
    ):
        reduction += FP8_ACCUMULATOR_ULPS * FP8_ACCUMULATOR_EPS
    port = next(p for p, u in node.op.outputs().items() if u == uid)
    averaged = node.op.probability_weighted.get(port)
    if averaged is not None:
        reduction += epsilon(graph.dtype_of(graph.tensors[node.op.inputs()[averaged]])) / 2
    rounded = node.op.rounded_operands.get(port)
    if rounded is not None:
        reduction += epsilon(graph.dtype_of(graph.tensors[node.op.inputs()[rounded]])) / 2
    scores = 0.0
    if node.op.score_operands:
        tensors = {p: graph.tensors[u] for p, u in node.op.ports().items()}
        scores = REDUCTION_ULPS_PER_SQRT_K * math.sqrt(node.op.score_terms(tensors)) * epsilon(compute)
    return Tolerance(2 * tiniest(out), rtol, reduction=reduction, scores=scores)


def step_tolerance(graph: Graph, nodes: list[Node], uid: int) -> Tolerance:
    """A step's exit: the producing node's tolerance plus the others' error terms (a region's chain).

    The others' rtol goes in ``inner``: validate replaces ``inner * |want|`` by
    those nodes' errors carried element by element to the exit.
    """
    producer = next(n for n in nodes if uid in n.op.outputs().values())
    own = node_tolerance(graph, producer, uid)
    if own.exact or len(nodes) == 1:
        return own
    others = [node_tolerance(graph, n, u) for n in nodes if n is not producer for u in n.op.outputs().values()]
    floats = [t for t in others if not t.exact]
    return Tolerance(
        own.atol,
        own.rtol,
        reduction=own.reduction + sum(t.reduction for t in floats),
        inner=sum(t.rtol for t in floats),
        scores=own.scores,
    )


def output_tolerance(graph: Graph, uid: int) -> Tolerance:
    """A loose end-to-end bound for a graph output: every node's error may add up."""
    return output_tolerances(graph, (uid,))[uid]


def output_tolerances(graph: Graph, uids: Iterable[int]) -> dict[int, Tolerance]:
    """``output_tolerance`` of each of ``uids``, the nodes' terms summed once for all (a training step has
    hundreds of outputs and nodes: summing per output cost its validation seconds)."""
    per_node = [node_tolerance(graph, n, u) for n in graph.nodes for u in n.op.outputs().values()]
    rtol_nodes = sum(t.rtol for t in per_node if not t.exact)
    reduction = sum(t.reduction for t in per_node)
    k = max((reduction_length(graph, n, u) for n in graph.nodes for u in n.op.outputs().values()), default=1)
    tolerances = {}
    for uid in uids:
        out = graph.dtype_of(graph.tensors[uid])
        if not out.is_float:
            tolerances[uid] = Tolerance(0.0, 0.0, exact=True)
            continue
        rtol = rtol_nodes + epsilon(out)
        tolerances[uid] = Tolerance(rtol * math.sqrt(k) * 1e-2 + 2 * tiniest(out), rtol, reduction=reduction)
    return tolerances
