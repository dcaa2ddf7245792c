"""Random inputs for a graph: reproducible, typed, and never all zeros; an op's draw and a model's.

``random_inputs`` draws what a typical op sees (floats in [-2, 2)). Through a model's layers at full width
that grows the activations by about the square root of each layer's fan-in (a Llama layer at d 512 puts out
values near 1e5, against 5 with initialized weights), which no initialized or trained model shows. ``initialized_inputs`` draws each weight N(0, 1 / fan-in) and each norm scale
1 + N(0, 0.01), as an initialization keeps activations near unit scale through the depth, and keeps
``random_inputs``' draw for every other input.
"""

from __future__ import annotations

import math
from collections.abc import Set

import attrs
import numpy as np

from sigdnn.dtypes import DataType, round_to
from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor


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

    An input whose values an op constrains (sequence lengths, offsets, gates) takes the op's own draw, the
    last node's; each node is handed what earlier nodes drew, so that nodes sharing such inputs agree.
    """
    rng = np.random.default_rng(seed)
    drawn = [t for t in graph.inputs if t.name not in skip]
    inputs = {t.name: random_array(rng, t.dims, graph.dtype_of(t)) for t in drawn}
    for uid, value in constrained_draws(graph, rng, {t.uid for t in drawn}).items():
        inputs[graph.tensors[uid].name] = value
    return inputs


def constrained_draws(graph: Graph, rng: np.random.Generator, uids: Set[int]) -> dict[int, np.ndarray]:
    """Uid -> the op's own draw of each input among ``uids`` an op constrains (sequence lengths, offsets, gates):
    the last node's, each node handed what earlier nodes drew (``Op.random_inputs``' ``given``), so that nodes
    sharing such inputs agree."""
    found: dict[int, np.ndarray] = {}
    for node in graph.nodes:
        tensors = {p: graph.tensors[u] for p, u in node.op.ports().items()}
        resolved = {p: attrs.evolve(t, dtype=graph.dtype_of(t)) for p, t in tensors.items()}
        given = {p: found[t.uid] for p, t in tensors.items() if t.uid in found}
        for port, value in node.op.random_inputs(resolved, rng, given).items():
            if tensors[port].uid in uids:
                found[tensors[port].uid] = value
    return found


def is_weight(t: Tensor) -> bool:
    """A layer's weight by sigdnn.models' names (``*.w``, ``w*``) or torch's and ONNX's (``*.weight``)."""
    return t.rank >= 2 and (t.name.endswith((".w", ".weight")) or t.name.startswith("w"))


def fan_in(t: Tensor) -> int:
    """The inputs each output of the weight's layer sums: a linear [in, out] its in, a conv [K, C, *R] C R."""
    return t.dims[0] if t.rank == 2 else math.prod(t.dims[1:])


def initialized_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """``random_inputs`` with weights and norm scales (``*.scale``) at a model's initialization scale."""
    inputs = random_inputs(graph, seed)
    rng = np.random.default_rng((seed, 1))
    for t in graph.inputs:
        if is_weight(t):
            values = rng.standard_normal(t.dims) / math.sqrt(fan_in(t))
        elif t.name.endswith(".scale"):
            values = 1.0 + 0.1 * rng.standard_normal(t.dims)
        else:
            continue
        inputs[t.name] = round_to(values, graph.dtype_of(t))
    return inputs
