"""Elements an op leaves unspecified (attention's padding): validation takes the reference's value there."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sigdnn.graph.graph import Graph


def unspecified_positions(graph: Graph, values: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Tensor name -> bool mask of its unspecified elements, for every node output that has some.

    ``values``: arrays by tensor name; a node whose inputs are not all there is skipped.
    """
    masks: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        ins = node.op.inputs()
        if not all(graph.tensors[u].name in values for u in ins.values()):
            continue
        tensors = {p: graph.tensors[u] for p, u in node.op.ports().items()}
        found = node.op.unspecified({p: values[graph.tensors[u].name] for p, u in ins.items()}, tensors)
        masks.update({tensors[port].name: mask for port, mask in found.items()})
    return masks


def specified(got: np.ndarray, want: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    """``got`` with ``want``'s values where the op leaves the element unspecified."""
    return got if mask is None else np.where(mask, want, got)
