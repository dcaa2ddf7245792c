"""From graph nodes to a KernelSpec: what one generated kernel computes, or why it cannot.

Shared by the single-node builder (a spec of one node) and the fusion
builder (a spec of a region): both decline through ``NotSupported`` with
the reason, naming the node.
"""

from __future__ import annotations

from collections.abc import Sequence

from sigdnn.dtypes import DataType
from sigdnn.errors import NotSupported
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.pointwise import Pointwise
from sigdnn.plan_builders.cutile import codegen
from sigdnn.plan_builders.cutile.codegen import CT_DTYPES, KernelSpec
from sigdnn.plan_builders.cutile.layout import axis_walk, plan_iteration
from sigdnn.plan_builders.cutile.pointwise_expressions import NodeSpec, supports

FLOAT_COMPUTE = frozenset({DataType.FLOAT32, DataType.FLOAT16, DataType.BFLOAT16})
EXACT_IN_FLOAT32 = frozenset({DataType.INT8, DataType.UINT8, DataType.BOOL})  # integer io a float kernel reads exactly


def node_compute(node: Node, graph: Graph) -> str:
    """The kernel compute type of ``node`` ("float", "int32", "int64"); NotSupported with the reason."""
    where = f"node '{node.name}'"
    op = node.op
    if not isinstance(op, Pointwise):
        raise NotSupported(f"{where}: not a pointwise node ({op.kind})")
    dtypes = {graph.dtype_of(graph.tensors[u]) for u in op.ports().values()}
    unknown = sorted(str(d) for d in dtypes if str(d) not in CT_DTYPES)
    if unknown:
        raise NotSupported(f"{where}: dtype(s) {unknown} have no cuTile kernel")
    compute = graph.compute_dtype_of(node)
    if op.mode == "gen_index":
        kind = "int64" if DataType.INT64 in dtypes else "int32"
    elif compute in FLOAT_COMPUTE:
        wide = sorted(str(d) for d in dtypes if not d.is_float and d not in EXACT_IN_FLOAT32)
        if wide:
            raise NotSupported(f"{where}: float compute reads {wide} inexactly in float32")
        kind = "float"
    elif compute.is_integer:
        kind = "int64" if DataType.INT64 in dtypes | {compute} else "int32"
    else:
        raise NotSupported(f"{where}: compute dtype {compute}; cuTile kernels compute in float32 or integers")
    if not supports(op.mode, kind):
        raise NotSupported(f"{where}: mode {op.mode} has no {kind} kernel")
    for name, value in op.params().items():
        if name != "axis" and not abs(value) < float("inf"):
            raise NotSupported(f"{where}: parameter {name}={value} is not finite")
    return kind


def kernel_spec(
    graph: Graph, nodes: Sequence[Node], entries: Sequence[int], exits: Sequence[int], tile: int | None = None
) -> KernelSpec:
    """The spec of ``nodes`` (in execution order) reading ``entries`` and storing ``exits`` (uids)."""
    where = f"node '{nodes[0].name}'" if len(nodes) == 1 else f"region {nodes[0].name}..{nodes[-1].name}"
    first = graph.tensors[exits[0]]
    for uid in exits[1:]:
        t = graph.tensors[uid]
        if t.dims != first.dims or t.strides != first.strides:
            raise NotSupported(f"{where}: outputs '{first.name}' and '{t.name}' are laid out differently")
    tensors = [graph.tensors[u] for u in entries]
    try:
        space = plan_iteration(first.dims, first.strides, [(t.dims, t.strides) for t in tensors])
    except ValueError as e:
        raise NotSupported(f"{where}: {e}") from None
    value = {uid: k for k, uid in enumerate(entries)}
    specs = []
    for node in nodes:
        op = node.op
        kind = node_compute(node, graph)
        params = tuple(sorted(op.params().items()))
        if op.mode == "gen_index":
            params = (("walk", axis_walk(first.dims, first.strides, op.axis)),)
        out = op.out_0
        specs.append(
            NodeSpec(
                op.mode,
                tuple(value[u] for u in op.inputs().values()),
                str(graph.dtype_of(graph.tensors[out])),
                kind,
                params,
            )
        )
        value[out] = len(entries) + len(specs) - 1
    return KernelSpec(
        space,
        tuple(str(graph.dtype_of(t)) for t in tensors),
        tuple(specs),
        tuple(value[u] for u in exits),
        tile or codegen.default_tile(specs),
    )
