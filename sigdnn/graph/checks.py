"""Graph rules, checked before anything is planned or allocated.

``check_graph`` enforces limits, uid and name uniqueness, dangling ports,
single writers, shape rules and acyclicity, and returns an execution order
computed from the dataflow (the order nodes arrive in is never trusted).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import attrs

from sigdnn.errors import GraphError
from sigdnn.graph.graph import Graph
from sigdnn.graph.layout import is_non_overlapping, span_elements
from sigdnn.graph.limits import DEFAULT_LIMITS, Limits
from sigdnn.graph.node import Node
from sigdnn.graph.tensor import Tensor


def _check_tensor(graph: Graph, t: Tensor, limits: Limits) -> int:
    """Check one tensor; return the bytes it costs: its strided span or its logical size, whichever is larger.

    An input may declare overlapping strides (a broadcast view): its span is
    small, but every backend reads it element by element and the reference
    widens it to one float64 per logical element, so it is priced at its
    logical size.
    """
    where = f"tensor '{t.name}' (uid {t.uid})"
    if len(t.name) > limits.max_name_length:
        raise GraphError(f"{where}: name longer than {limits.max_name_length}")
    if not 1 <= len(t.dims) <= limits.max_rank:
        raise GraphError(f"{where}: rank {len(t.dims)} outside 1..{limits.max_rank}")
    if len(t.strides) != len(t.dims):
        raise GraphError(f"{where}: {len(t.strides)} strides for {len(t.dims)} dims")
    if any(d < 1 for d in t.dims):
        raise GraphError(f"{where}: dims {list(t.dims)} must all be >= 1")
    if any(s < 1 and d > 1 for d, s in zip(t.dims, t.strides)) or any(s < 0 for s in t.strides):
        raise GraphError(f"{where}: strides {list(t.strides)} must be >= 1")
    if max(t.strides) > limits.max_elements:
        # Even on a dim of size 1, where it moves nothing, NumPy multiplies it out to bytes.
        raise GraphError(f"{where}: stride {max(t.strides)} exceeds {limits.max_elements} elements")
    elements = max(span_elements(t.dims, t.strides), t.size)
    if elements > limits.max_elements:
        raise GraphError(
            f"{where}: dims {list(t.dims)} / strides {list(t.strides)} exceed {limits.max_elements} elements"
        )
    dtype = graph.dtype_of(t)
    if t.value is not None:
        if t.dtype is None:
            # Tensor.scalar() reads the value in the tensor's own dtype, never a graph default.
            raise GraphError(f"{where}: a pass-by-value scalar needs its own data type")
        if t.is_virtual:
            raise GraphError(f"{where}: a pass-by-value scalar cannot be virtual")
        if len(t.value) != dtype.itemsize or any(d != 1 for d in t.dims):
            raise GraphError(
                f"{where}: pass-by-value value must be one {dtype} ({dtype.itemsize} bytes) with all dims 1"
            )
    if t.data is not None:
        if t.dtype is None:
            raise GraphError(f"{where}: a constant needs its own data type")
        if t.is_virtual or t.value is not None:
            raise GraphError(f"{where}: a constant can be neither virtual nor pass-by-value")
        if len(t.data) != t.size * dtype.itemsize:
            raise GraphError(
                f"{where}: constant data holds {len(t.data)} bytes; dims {list(t.dims)} of {dtype} need "
                f"{t.size * dtype.itemsize}"
            )
    return elements * dtype.itemsize


def _widening_bytes(node: Node, ins: dict[str, Tensor], outs: dict[str, Tensor]) -> int:
    """What computing the node at full precision holds: one float64 per logical element of its ports.

    Elementwise nodes run block by block, so they hold a few blocks at most;
    a whole-tensor op (a reduction, a matmul, a convolution) holds its
    operands and results widened at once.
    """
    if node.op.elementwise():
        return 0
    return 8 * sum(t.size for t in (*ins.values(), *outs.values()))


def _resolved(graph: Graph, t: Tensor) -> Tensor:
    """``t`` with its dtype resolved, so op rules judge what the wire will carry.

    A builder-made tensor may leave its dtype unset (the graph default
    applies); the serialized form spells the default out, and a rule such as
    "conv needs floats" must give the same answer for both.
    """
    return t if t.dtype is not None else attrs.evolve(t, dtype=graph.dtype_of(t))


def check_graph(graph: Graph, limits: Limits = DEFAULT_LIMITS, *, reference_scratch: bool = True) -> list[int]:
    """Check every rule; return node indices in a valid execution order.

    ``reference_scratch``: each node's reference scratch (its float64 widening, an op's ``scratch_bytes``)
    counts against ``max_total_bytes``; a GPU executor leaves it out (and checks the steps that fall back to
    the reference with ``check_reference_cost``).
    """
    if len(graph.tensors) > limits.max_tensors or len(graph.nodes) > limits.max_nodes:
        raise GraphError(
            f"graph '{graph.name}' has {len(graph.tensors)} tensors and {len(graph.nodes)} nodes (limits {limits.max_tensors}, {limits.max_nodes})"
        )
    names: dict[str, int] = {}
    total = 0
    largest: tuple[int, Tensor] | None = None
    for uid, t in graph.tensors.items():
        if uid != t.uid:
            raise GraphError(f"tensor '{t.name}' is stored under uid {uid} but has uid {t.uid}")
        nbytes = _check_tensor(graph, t, limits)
        total += nbytes
        if largest is None or nbytes > largest[0]:
            largest = (nbytes, t)
        if names.setdefault(t.name, uid) != uid:
            raise GraphError(f"duplicate tensor name '{t.name}' (uids {names[t.name]} and {uid})")
    if largest is not None and total > limits.max_total_bytes:
        raise GraphError(
            f"graph '{graph.name}': its tensors take {total} bytes (limit {limits.max_total_bytes}); "
            f"the largest is tensor '{largest[1].name}' (uid {largest[1].uid}, {largest[0]} bytes)"
        )

    producer: dict[int, int] = {}
    node_names: set[str] = set()
    work = 0
    for i, node in enumerate(graph.nodes):
        where = f"node '{node.name}'"
        if node.name in node_names:
            raise GraphError(f"duplicate node name '{node.name}'")
        node_names.add(node.name)
        for port, uid in node.op.ports().items():
            if uid not in graph.tensors:
                raise GraphError(
                    f"{where}: port '{port}' names uid {uid}, which is not a tensor of the graph (dangling)"
                )
        ins, outs = node.op.inputs(), node.op.outputs()
        for port, uid in outs.items():
            t = graph.tensors[uid]
            if uid in producer:
                raise GraphError(
                    f"tensor '{t.name}' is written by both node '{graph.nodes[producer[uid]].name}' and {where}"
                )
            if t.value is not None:
                raise GraphError(f"{where}: port '{port}' writes pass-by-value scalar '{t.name}'")
            if t.data is not None:
                raise GraphError(f"{where}: port '{port}' writes constant '{t.name}'")
            if uid in ins.values():
                raise GraphError(f"{where}: tensor '{t.name}' is both read and written")
            producer[uid] = i
        in_tensors = {p: _resolved(graph, graph.tensors[u]) for p, u in ins.items()}
        out_tensors = {p: _resolved(graph, graph.tensors[u]) for p, u in outs.items()}
        try:
            expected = node.op.infer_dims(in_tensors)
            if set(expected) != set(out_tensors):
                extra, absent = sorted(set(out_tensors) - set(expected)), sorted(set(expected) - set(out_tensors))
                raise GraphError(
                    f"its attributes and inputs give outputs {sorted(expected)}; "
                    + (f"port(s) {extra} should be absent" if extra else f"port(s) {absent} are missing")
                )
            node.op.check(in_tensors, out_tensors)
        except GraphError as e:
            raise GraphError(f"{where}: {e}") from None
        for port, dims in expected.items():
            t = out_tensors[port]
            if t.dims != tuple(dims):
                raise GraphError(
                    f"{where}: output '{t.name}' has dims {list(t.dims)}, the shape rule gives {list(dims)}"
                )
            if not is_non_overlapping(t.dims, t.strides):
                raise GraphError(f"{where}: output '{t.name}' strides {list(t.strides)} overlap")
        _check_scratch(where, node, in_tensors, out_tensors, total, limits, charged=reference_scratch)
        work += node.op.work({**in_tensors, **out_tensors})
        if work > limits.max_work:
            raise GraphError(
                f"{where}: the graph's work reaches {work} element operations here (limit {limits.max_work})"
            )

    for uid, t in graph.tensors.items():
        if t.is_virtual and uid not in producer:
            readers = [n.name for n in graph.nodes if uid in n.op.inputs().values()]
            raise GraphError(
                f"virtual tensor '{t.name}' (uid {uid}) is read by {readers or 'no node'} but no node writes it"
            )
    return topological_order(graph, producer)


def _check_scratch(
    where: str, node: Node, ins: dict[str, Tensor], outs: dict[str, Tensor], total: int, limits: Limits, charged: bool
) -> None:
    """A node's reference scratch (an op's ``scratch_bytes``, which may refuse its own cost, and the float64
    widening), which lives only while the node runs: on top of the graph's ``total`` tensor bytes it must fit
    ``max_total_bytes`` where ``charged``."""
    try:
        scratch = node.op.scratch_bytes(ins, limits) + _widening_bytes(node, ins, outs)
    except GraphError as e:
        raise GraphError(f"{where}: {e}") from None
    if charged and total + scratch > limits.max_total_bytes:
        raise GraphError(
            f"{where}: needs {scratch} bytes of scratch; with the graph's tensors that "
            f"makes {total + scratch} bytes (limit {limits.max_total_bytes})"
        )


def check_reference_cost(graph: Graph, nodes: Sequence[Node], limits: Limits) -> None:
    """What running ``nodes`` on the reference costs (a GPU plan's fallback steps), within ``limits``: each node's
    float64 scratch on top of the graph's tensors, and their work together; GraphError naming the node."""
    if not nodes:  # a plan with no fallback step (every strict one): nothing of the reference's runs
        return
    total = sum(_check_tensor(graph, t, limits) for t in graph.tensors.values())
    work = 0
    for node in nodes:
        where = f"node '{node.name}' (falling back to the reference)"
        ins = {p: _resolved(graph, graph.tensors[u]) for p, u in node.op.inputs().items()}
        outs = {p: _resolved(graph, graph.tensors[u]) for p, u in node.op.outputs().items()}
        _check_scratch(where, node, ins, outs, total, limits, charged=True)
        work += node.op.work({**ins, **outs})
        if work > limits.max_work:
            raise GraphError(
                f"{where}: the reference's work reaches {work} element operations (limit {limits.max_work})"
            )


def topological_order(graph: Graph, producer: dict[int, int]) -> list[int]:
    """Kahn's algorithm, ties broken by arrival order; GraphError on a cycle."""
    n = len(graph.nodes)
    consumers: list[list[int]] = [[] for _ in range(n)]
    waiting = [0] * n
    for i, node in enumerate(graph.nodes):
        for uid in set(node.op.inputs().values()):
            p = producer.get(uid)
            if p is not None:
                consumers[p].append(i)
                waiting[i] += 1
    ready = [i for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for j in consumers[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, j)
    if len(order) != n:
        raise GraphError(f"graph '{graph.name}' has a cycle: {' -> '.join(_cycle(graph, producer, waiting))}")
    return order


def _cycle(graph: Graph, producer: dict[int, int], waiting: list[int]) -> list[str]:
    """Names along one cycle among the nodes Kahn's algorithm could not order."""
    start = next(i for i, w in enumerate(waiting) if w > 0)
    seen: dict[int, int] = {}
    path: list[int] = []
    i = start
    while i not in seen:
        seen[i] = len(path)
        path.append(i)
        i = next(producer[u] for u in graph.nodes[i].op.inputs().values() if u in producer and waiting[producer[u]] > 0)
    loop = [*path[seen[i] :], i]
    return [graph.nodes[k].name for k in reversed(loop)]
