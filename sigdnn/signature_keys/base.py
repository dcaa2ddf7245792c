"""SignatureKey: what a builder is chosen by — op, traits, dtypes, compute dtype.

One frozen, hashable class for every op: the op's kind, the structural
traits its declaration names (a pointwise mode, a conv's spatial rank), each
present port's dtype and the compute dtype. Never dims or strides: those
belong to a builder's applicability check, so one key covers every shape.
"""

from __future__ import annotations

from typing import Any

import attrs

from sigdnn.dtypes import DataType
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node


@attrs.frozen
class SignatureKey:
    op: str  # the op's kind ("pointwise", "conv_fprop", ...): the registry indexes builders by it
    traits: tuple[tuple[str, Any], ...]
    inputs: tuple[tuple[str, DataType], ...]  # present input ports, in port order
    outputs: tuple[tuple[str, DataType], ...]  # present output ports, in port order
    compute: DataType

    def trait(self, name: str, default: Any = None) -> Any:
        return dict(self.traits).get(name, default)

    def dtype(self, port: str) -> DataType | None:
        return dict(self.inputs).get(port) or dict(self.outputs).get(port)

    def __str__(self) -> str:
        title = "".join(part.capitalize() for part in self.op.split("_"))
        rank = self.trait("spatial_rank")
        title += f"{rank}d" if rank is not None else ""  # ConvFprop2d
        shown = [(k, v) for k, v in self.traits if k != "spatial_rank"]
        traits = ",".join(str(v) if k in ("mode", "phase") else f"{k}={v}" for k, v in shown)
        ins = ",".join(d.short for _, d in self.inputs)
        outs = ",".join(d.short for _, d in self.outputs)
        return f"{title}{f'[{traits}]' if traits else ''}({ins}->{outs}; {self.compute.short})"


def key_for(node: Node, graph: Graph) -> SignatureKey:
    """The signature key of ``node``, its tensors' dtypes resolved in ``graph``."""
    op = node.op
    tensors = {p: graph.tensors[u] for p, u in op.ports().items()}
    return SignatureKey(
        op.kind,
        op.key_traits(tensors),
        tuple((p, graph.dtype_of(graph.tensors[u])) for p, u in op.inputs().items()),
        tuple((p, graph.dtype_of(graph.tensors[u])) for p, u in op.outputs().items()),
        graph.compute_dtype_of(node),
    )
