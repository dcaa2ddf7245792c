"""Elements an op leaves unspecified (attention's padding): validation takes the reference's value there."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from sigdnn.accuracy.arrays import HOST, Arrays
from sigdnn.graph.graph import Graph


class _OnHost(Mapping[str, np.ndarray]):
    """A node's input values by port, fetched to the host when the op reads one (most ops read none; attention
    reads its sequence lengths)."""

    def __init__(self, names: Mapping[str, str], values: Mapping[str, Any], xp: Arrays) -> None:
        self._names, self._values, self._xp = names, values, xp

    def __getitem__(self, port: str) -> np.ndarray:
        return self._xp.host(self._values[self._names[port]])

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def unspecified_positions(graph: Graph, values: Mapping[str, Any], xp: Arrays = HOST) -> dict[str, np.ndarray]:
    """Tensor name -> bool mask (on the host) of its unspecified elements, for every node output that has some.

    ``values``: arrays of ``xp`` by tensor name; a node whose inputs are not all there is skipped.
    """
    masks: dict[str, np.ndarray] = {}
    for node in graph.nodes:
        names = {p: graph.tensors[u].name for p, u in node.op.inputs().items()}
        if not all(name in values for name in names.values()):
            continue
        tensors = {p: graph.tensors[u] for p, u in node.op.ports().items()}
        found = node.op.unspecified(_OnHost(names, values, xp), tensors)
        masks.update({tensors[port].name: mask for port, mask in found.items()})
    return masks


def specified(got: Any, want: Any, mask: np.ndarray | None, xp: Arrays = HOST) -> Any:
    """``got`` with ``want``'s values where the op leaves the element unspecified (``mask``, on the host)."""
    return got if mask is None else xp.where(xp.upload(mask), want, got)
