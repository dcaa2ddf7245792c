"""How far a graph's outputs spread when every node rounds as differently as its tolerance allows.

The end-to-end check of a graph's outputs compares them with a reference
run from the graph's inputs; its bound adds, node by node, the error each
node may bring (``step_reference``: a first-order carry that moves each
input by its bound alike and with random signs). Through a deep backward
pass that carry says too little: ReLU masks and pooling argmaxes flip, and
batchnorm backward's mean terms turn errors that are not alike in every
element into more than the moves it tries. A device that differs from the
reference by nothing but one ulp at random elements of every output
(tests/validation/test_validate_spread.py) failed a ResNet-50 training
step end to end, at the same batchnorm gradients as the H200 did.

So validation also measures the spread of legitimate results: ``RUNS``
reference runs of the graph in which each node's float outputs move by a
uniform random fraction of that node's own tolerance (rounded back to their
dtype) before the next node reads them. An output may then differ from the
truth by ``MARGIN`` times the largest deviation of those runs, where that is
more than the carried bound. A device wrong at one node still fails that
node's step check at the node's own tolerance.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sigdnn.accuracy.tolerances import node_tolerance
from sigdnn.graph.graph import Graph
from sigdnn.runtime.device import ExecutionContext

RUNS = 2
MARGIN = 2.0


def _moved(values: np.ndarray, size: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``values`` moved by a uniform random fraction of ``size`` per element, rounded to their dtype (finite
    values only: an Inf or NaN stays what it is)."""
    with np.errstate(invalid="ignore", over="ignore"):
        wide = values.astype(np.float64)
        moved = (wide + rng.uniform(-1.0, 1.0, values.shape) * size).astype(values.dtype)
        return np.where(np.isfinite(wide) & np.isfinite(moved.astype(np.float64)), moved, values)


def perturbed_run(
    graph: Graph, plan: Any, entries: Mapping[str, np.ndarray], context: ExecutionContext, rng: np.random.Generator
) -> dict[int, np.ndarray]:
    """Every tensor of one reference run in which each node's float outputs are moved within its tolerance.

    ``plan``: the reference's node-by-node plan; ``entries``: the graph's inputs, scalars and constants by name.
    """
    values = {t.uid: np.asarray(entries[t.name]) for t in graph.tensors.values() if t.name in entries}
    for step in plan.steps:
        (node,) = step.nodes
        op = node.op
        ins = {port: values[uid] for port, uid in op.inputs().items()}
        outs = {port: np.empty(graph.tensors[uid].dims, graph.dtype_of(graph.tensors[uid]).numpy)
                for port, uid in op.outputs().items()}  # fmt: skip
        step.plan.execute({**ins, **outs}, context)
        for port, uid in op.outputs().items():
            if graph.dtype_of(graph.tensors[uid]).is_float:
                tolerance = node_tolerance(graph, node, uid)
                with np.errstate(invalid="ignore", over="ignore"):
                    size = tolerance.atol + tolerance.rtol * np.abs(outs[port].astype(np.float64))
                outs[port] = _moved(outs[port], size, rng)
            values[uid] = outs[port]
    return values


def output_spread(
    graph: Graph,
    plan: Any,
    entries: Mapping[str, np.ndarray],
    truth: Mapping[str, np.ndarray],
    context: ExecutionContext,
    runs: int = RUNS,
    seed: int = 0,
) -> dict[int, np.ndarray]:
    """Per float graph output: ``MARGIN`` times the largest |perturbed run - truth| over ``runs`` runs."""
    outputs = [t for t in graph.outputs if graph.dtype_of(t).is_float]
    worst = {t.uid: np.zeros(t.dims) for t in outputs}
    for k in range(runs):
        values = perturbed_run(graph, plan, entries, context, np.random.default_rng(seed + k))
        for t in outputs:
            with np.errstate(invalid="ignore", over="ignore"):
                deviation = np.abs(values[t.uid].astype(np.float64) - np.asarray(truth[t.name], np.float64))
            worst[t.uid] = np.fmax(worst[t.uid], np.where(np.isfinite(deviation), deviation, 0.0))
    return {uid: MARGIN * w for uid, w in worst.items()}
