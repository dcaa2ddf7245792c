"""Random inputs for a graph: reproducible, typed, and never all zeros."""

from __future__ import annotations

from collections.abc import Set

import attrs
import numpy as np

from sigdnn.dtypes import DataType, round_to
from sigdnn.graph.graph import Graph


def random_array(rng: np.random.Generator, dims: tuple[int, ...], dtype: DataType) -> np.ndarray:
    """Values a typical op sees: floats in [-2, 2), small integers, random bools."""
    if dtype is DataType.BOOL:
        return rng.random(dims) < 0.5
    if dtype.is_integer:
        low = 0 if dtype is DataType.UINT8 else -8
        return rng.integers(low, 9, size=dims).astype(dtype.numpy)
    return round_to(rng.uniform(-2.0, 2.0, size=dims), dtype)


def random_inputs(graph: Graph, seed: int = 0, skip: Set[str] = frozenset()) -> dict[str, np.ndarray]:
    """One array per graph input (by name), in its dtype and logical dims.

    An input whose values an op constrains (sequence lengths, offsets, gates) takes the op's own draw.
    """
    rng = np.random.default_rng(seed)
    inputs = {t.name: random_array(rng, t.dims, graph.dtype_of(t)) for t in graph.inputs if t.name not in skip}
    for node in graph.nodes:
        tensors = {p: graph.tensors[u] for p, u in node.op.ports().items()}
        resolved = {p: attrs.evolve(t, dtype=graph.dtype_of(t)) for p, t in tensors.items()}
        for port, value in node.op.random_inputs(resolved, rng).items():
            if tensors[port].name in inputs:
                inputs[tensors[port].name] = value
    return inputs
