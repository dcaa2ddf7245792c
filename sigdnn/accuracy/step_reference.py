"""The reference's side of checking one step: its exits recomputed from the step's own entries, with bounds.

Below the executor and validation both: ``validate`` checks every step of a
device run with :func:`run_reference`, and the executor's measured builder
choice judges each candidate with :func:`step_judge`, the same check on one
step. ``plans`` map a node's name to the reference's step for it (its
``plan`` runs the node on host arrays).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any, Protocol

import attrs
import numpy as np

from sigdnn.accuracy.arrays import HOST, Arrays
from sigdnn.accuracy.compare import compare
from sigdnn.accuracy.tolerances import node_tolerance, step_tolerance
from sigdnn.accuracy.unspecified import specified, unspecified_positions
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.runtime.device import ExecutionContext


class StepNodes(Protocol):
    """What the reference reads of a device step: its nodes in order and the tensors it reads and writes."""

    nodes: Sequence[Node]
    reads: Sequence[int]
    writes: Sequence[int]


@attrs.frozen
class StepReference:
    """The reference's side of one device step's check.

    ``values``: the exits' reference values. ``sums``: sum(|terms|) per
    element for each tensor downstream of a linear reduction (matmul, conv)
    inside the step, carried through elementwise nodes and data movement,
    so a fused epilogue keeps its GEMM's accumulation bound. ``through``:
    the same from the graph's inputs on, seeded with the earlier steps'
    (the end-to-end check of an output downstream of a GEMM in another step
    needs that GEMM's bound, while the step check must not get it: it starts
    from the device's own entries). ``carried``: in a fused step, the error
    the step's other nodes bring to each exit element (see ``_carry_errors``),
    and for an output of a softmax of scores the scores' rounding
    (``_score_errors``).
    ``errors_through``: every node's error carried the same way from the
    graph's inputs on (seeded with the earlier steps'), for the end-to-end
    checks: an output that cancels keeps the errors of the values before it.
    """

    values: dict[int, Any]
    sums: dict[int, Any]
    through: dict[int, Any]
    carried: dict[int, Any]
    errors_through: dict[int, Any]


def _carry_errors(
    graph: Graph,
    node: Node,
    plan: Any,
    ins: Mapping[str, Any],
    outs: Mapping[str, Any],
    errs: dict[int, Any],
    carried: dict[int, Any],
    context: ExecutionContext,
    xp: Arrays,
) -> None:
    """The error bound of each float output of ``node`` inside a fused step, at its own magnitude.

    ``carried[uid]`` is what the inputs' bounds (``errs``, from the step's
    earlier nodes; the step's entries come from the device and carry none)
    do to the output: the reference plan run again with each carrying input
    moved by its bound either way, all elements alike and with random signs,
    the largest change kept, summed over the inputs (first order, exact in
    the bound for elementwise ops: a tiny exit after cancellation keeps the
    inner nodes' errors at their own size; the random signs keep a
    normalization's backward from cancelling a move alike).
    Data movement moves the bounds; a linear reduction takes them through
    its |terms| run. ``errs[uid]`` adds the node's own atol + rtol * |value|.
    """
    op = node.op
    bounds = {p: errs[uid] for p, uid in op.inputs().items() if uid in errs}
    floats = {p: uid for p, uid in op.outputs().items() if graph.dtype_of(graph.tensors[uid]).is_float}
    if not floats:
        return
    if not bounds:
        arrived = {p: xp.full(outs[p].shape, 0.0) for p in floats}
    else:

        def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
            results = {p: xp.empty(a.shape, np.float64 if p in floats else a.dtype) for p, a in outs.items()}
            plan.execute({**inputs, **results}, context)
            return {p: results[p] for p in floats}

        if op.moves_data:
            arrived = run({p: bounds.get(p, xp.full(a.shape, 0.0)) for p, a in ins.items()})
        elif op.sums_absolute_terms:
            absolute = {p: xp.abs(a) for p, a in ins.items()}
            arrived = {p: xp.full(outs[p].shape, 0.0) for p in floats}
            for p, bound in bounds.items():
                for q, value in run({**absolute, p: bound}).items():
                    arrived[q] = xp.add(arrived[q], value)
        else:
            base = run(ins)
            arrived = {p: xp.full(outs[p].shape, 0.0) for p in floats}
            for p, bound in bounds.items():
                # Each input moved by its bound both ways, all elements alike and with random signs: a move
                # alike cancels in an op that subtracts a mean or is shift-invariant (normalizations, softmax,
                # their backward passes), random signs do not. A float64 bound promotes the moved input to
                # float64: the move is exact.
                signs = xp.random_signs(op.inputs()[p], tuple(ins[p].shape))
                patterns = (bound, xp.mul(signs, bound))
                moves = [xp.mul(pattern, sign) for pattern in patterns for sign in (1.0, -1.0)]
                moved = [run({**ins, p: xp.add(ins[p], move)}) for move in moves]
                for q in floats:
                    # an unbounded change counts as none, a NaN side drops (pairwise: fmax.reduce of a list
                    # stacks the list first)
                    change = functools.reduce(xp.fmax, (xp.abs(xp.sub(m[q], base[q])) for m in moved))
                    arrived[q] = xp.add(arrived[q], xp.finite_or_zero(change))
    for p, uid in floats.items():
        own = node_tolerance(graph, node, uid)
        carried[uid] = arrived[p]
        errs[uid] = xp.add(xp.add(arrived[p], own.atol), xp.mul(xp.magnitude(outs[p]), own.rtol))


def _score_errors(
    graph: Graph,
    node: Node,
    plan: Any,
    ins: Mapping[str, Any],
    outs: Mapping[str, Any],
    context: ExecutionContext,
    xp: Arrays,
) -> dict[int, Any]:
    """How far the rounding of a softmax's scores moves each of ``node``'s outputs (``Op.score_operands``).

    The reference plan runs again with each score operand (q, k) moved relatively by the tolerance's
    ``scores`` (4 sqrt(D) ulps of the compute dtype) with random signs, and the largest change is allowed
    normwise: a score then moves by about a dot product's accumulation error, as a device's does, and the
    softmax itself says what that does to the output (much at spread weights and large logits, nothing at
    one-hot ones), which no bound from magnitudes alone could say without being far looser. (The moves
    promote q and k to float64, so they are exact; per element the change of one random move undershoots
    some elements' real error, hence normwise.)
    """
    op = node.op
    if not op.score_operands:
        return {}

    def run(inputs: Mapping[str, Any]) -> dict[str, Any]:
        results = {p: xp.empty(a.shape, np.float64) for p, a in outs.items()}
        plan.execute({**inputs, **results}, context)
        return results

    uids = op.outputs()
    relative = node_tolerance(graph, node, next(iter(uids.values()))).scores
    moved = {}
    for p in op.score_operands:
        signs = xp.random_signs(op.inputs()[p], tuple(ins[p].shape))
        moved[p] = xp.add(ins[p], xp.mul(xp.mul(ins[p], signs), relative))
    base, shifted = run(ins), run({**ins, **moved})
    return {uid: xp.full(tuple(outs[p].shape), xp.largest_magnitude(xp.sub(shifted[p], base[p])))
            for p, uid in uids.items()}  # fmt: skip


def run_reference(
    graph: Graph,
    step: StepNodes,
    plans: Mapping[str, Any],
    seen: Mapping[str, Any],
    upstream: Mapping[int, Any],
    upstream_errors: Mapping[int, Any],
    context: ExecutionContext,
    xp: Arrays = HOST,
) -> StepReference:
    """The reference's exit values for one device step, fed the entry tensors the device saw, and their bounds.

    ``xp``: where the arrays live (the host's NumPy, or the GPU reference's device: ``accuracy.arrays``)."""
    values: dict[int, Any] = {}
    sums: dict[int, Any] = {}
    errs: dict[int, Any] = {}
    arrivals: dict[int, Any] = {}
    errors_through = {uid: upstream_errors[uid] for uid in step.reads if uid in upstream_errors}
    fused = len(step.nodes) > 1
    through = {uid: upstream[uid] for uid in step.reads if uid in upstream}

    def entry(uid: int) -> Any:
        if uid not in values:
            t = graph.tensors[uid]
            values[uid] = xp.cast(seen[t.name], graph.dtype_of(t).numpy)
        return values[uid]

    for node in step.nodes:
        reference = plans[node.name]
        op = node.op
        ins = {port: entry(uid) for port, uid in op.inputs().items()}
        outs = {port: xp.empty(graph.tensors[uid].dims, graph.dtype_of(graph.tensors[uid]).numpy)
                for port, uid in op.outputs().items()}  # fmt: skip
        reference.plan.execute({**ins, **outs}, context)
        for port, uid in op.outputs().items():
            values[uid] = outs[port]
        if fused:
            _carry_errors(graph, node, reference.plan, ins, outs, errs, arrivals, context, xp)
        _carry_errors(graph, node, reference.plan, ins, outs, errors_through, {}, context, xp)
        if op.sums_absolute_terms:
            absolute_outs = {p: xp.empty(a.shape, a.dtype) for p, a in outs.items()}
            reference.plan.execute({**{p: xp.abs(a) for p, a in ins.items()}, **absolute_outs}, context)
            for p, uid in op.outputs().items():
                sums[uid] = through[uid] = xp.widen(absolute_outs[p])
        elif op.elementwise():
            for table in (sums, through):
                carried = [table[uid] for uid in op.inputs().values() if uid in table]
                if carried:
                    for port, uid in op.outputs().items():
                        table[uid] = xp.broadcast(functools.reduce(xp.add, carried), tuple(outs[port].shape))
        elif op.moves_data:
            # Each output element is one input element: the op itself moves the bounds with the values
            # (the reference copies float64 into float64 as is; an input without a bound contributes 0).
            for table in (sums, through):
                carried = {p: table[uid] for p, uid in op.inputs().items() if uid in table}
                if carried:
                    moved = {p: xp.empty(a.shape, np.float64) for p, a in outs.items()}
                    bounds = {p: carried.get(p, xp.full(a.shape, 0.0)) for p, a in ins.items()}
                    reference.plan.execute({**bounds, **moved}, context)
                    table.update({uid: moved[p] for p, uid in op.outputs().items()})
        else:
            # A non-linear reduction (a norm, softmax, attention): no |terms| run exists, so its
            # accumulation bound is normwise, scaled by the output's largest magnitude (an average over
            # probability weights: the averaged input's, which bounds sum|terms|).
            tensors = {p: graph.tensors[u] for p, u in op.ports().items()}
            for port, uid in op.outputs().items():
                if op.reduction_length(tensors, port) > 1:  # dims are >= 1: never empty
                    averaged = op.probability_weighted.get(port)
                    basis = outs[port] if averaged is None else ins[averaged]
                    sums[uid] = through[uid] = xp.full(tuple(outs[port].shape), xp.largest_magnitude(basis))
        for uid, extra in _score_errors(graph, node, reference.plan, ins, outs, context, xp).items():
            arrivals[uid] = xp.add(arrivals[uid], extra) if uid in arrivals else extra  # the step's check
            errors_through[uid] = xp.add(errors_through[uid], extra)  # and the end-to-end one
    exits = {uid: values[uid] for uid in step.writes}
    carried = {uid: arrivals[uid] for uid in step.writes if uid in arrivals}
    return StepReference(exits, sums, through, carried, errors_through)


def step_judge(
    graph: Graph,
    nodes: Sequence[Node],
    writes: Sequence[int],
    inputs: Mapping[str, np.ndarray],
    plans: Mapping[str, Any],
) -> Callable[[Mapping[str, np.ndarray]], str | None]:
    """A judge of a step's outputs: None when they match the reference fed ``inputs`` (by name), else why not.

    The quick validation a measured builder choice runs on each candidate
    (``sigdnn.executor.autotune``), with ``validate``'s tolerances; ``plans``
    are the CPU reference's steps by node name (planned node by node), run
    once however many candidates are judged.
    """
    step = SimpleNamespace(nodes=tuple(nodes), writes=tuple(writes), reads=())  # nothing upstream to carry
    truth = run_reference(graph, step, plans, inputs, {}, {}, ExecutionContext())

    free = unspecified_positions(graph, inputs)

    def judge(outputs: Mapping[str, np.ndarray]) -> str | None:
        for uid, value in truth.values.items():
            name = graph.tensors[uid].name
            allowed = step_tolerance(graph, list(nodes), uid)
            got = specified(outputs[name], value, free.get(name))
            c = compare(name, got, value, allowed, truth.sums.get(uid), truth.carried.get(uid))
            if not c.passed:
                return (
                    f"{name}: {c.mismatches + c.nan_inf_mismatches} of {c.size} elements outside {c.tolerance} "
                    f"(max abs error {c.max_abs_error:.3g})"
                )
        return None

    return judge
