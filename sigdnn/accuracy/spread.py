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

from sigdnn.accuracy.arrays import HOST, Arrays
from sigdnn.accuracy.tolerances import node_tolerance
from sigdnn.graph.graph import Graph
from sigdnn.runtime.device import ExecutionContext

RUNS = 2
MARGIN = 2.0
SEEDS_PER_RUN = 2**40  # a run's seed times this plus a tensor's uid seeds that tensor's moves


def _moved(xp: Arrays, values: Any, size: Any, seed: int) -> Any:
    """``values`` moved by a uniform random fraction of ``size`` per element, rounded to their dtype (finite
    values only: an Inf or NaN stays what it is)."""
    wide = xp.widen(values)
    fractions = xp.random_fractions(seed, tuple(values.shape))
    moved = xp.widen(xp.round_to(xp.add(wide, xp.mul(fractions, size)), values.dtype))
    return xp.round_to(xp.where(xp.finite(moved), moved, wide), values.dtype)  # (an Inf or NaN moves to one)


def perturbed_run(
    graph: Graph,
    plan: Any,
    entries: Mapping[str, Any],
    context: ExecutionContext,
    seed: int,
    xp: Arrays = HOST,
    release: bool = False,
) -> dict[int, Any]:
    """Every tensor of one reference run in which each node's float outputs are moved within its tolerance.

    ``plan``: the reference's node-by-node plan; ``entries``: the graph's inputs, scalars and constants by name
    (arrays of ``xp``); ``seed`` with a tensor's uid seeds its moves. ``release``: keep only the graph outputs
    (a tensor is dropped once no later node reads it), for a full-size model.
    """
    values = {t.uid: entries[t.name] for t in graph.tensors.values() if t.name in entries}
    last_read = {uid: i for i, step in enumerate(plan.steps) for uid in step.nodes[0].op.inputs().values()}
    kept = {t.uid for t in graph.outputs}
    for index, step in enumerate(plan.steps):
        (node,) = step.nodes
        op = node.op
        ins = {port: values[uid] for port, uid in op.inputs().items()}
        outs = {port: xp.empty(graph.tensors[uid].dims, graph.dtype_of(graph.tensors[uid]).numpy)
                for port, uid in op.outputs().items()}  # fmt: skip
        step.plan.execute({**ins, **outs}, context)
        for port, uid in op.outputs().items():
            if graph.dtype_of(graph.tensors[uid]).is_float:
                tolerance = node_tolerance(graph, node, uid)
                size = xp.add(xp.mul(xp.magnitude(outs[port]), tolerance.rtol), tolerance.atol)
                outs[port] = _moved(xp, outs[port], size, seed * SEEDS_PER_RUN + uid)
            values[uid] = outs[port]
        if release:
            for uid in [u for u in values if u not in kept and last_read.get(u, -1) <= index]:
                del values[uid]
    return values


def output_spread(
    graph: Graph,
    plan: Any,
    entries: Mapping[str, Any],
    truth: Mapping[str, Any],
    context: ExecutionContext,
    runs: int = RUNS,
    seed: int = 0,
    xp: Arrays = HOST,
) -> dict[int, Any]:
    """Per float graph output: ``MARGIN`` times the largest |perturbed run - truth| over ``runs`` runs."""
    outputs = [t for t in graph.outputs if graph.dtype_of(t).is_float]
    worst = {t.uid: xp.full(t.dims, 0.0) for t in outputs}
    for k in range(runs):
        values = perturbed_run(graph, plan, entries, context, seed + k, xp, release=True)
        for t in outputs:
            deviation = xp.abs(xp.sub(values[t.uid], truth[t.name]))
            worst[t.uid] = xp.fmax(worst[t.uid], xp.finite_or_zero(deviation))
    return {uid: xp.mul(w, MARGIN) for uid, w in worst.items()}
