"""Inputs at a model's scale for sigdnn.models' graphs: weights drawn as an initialization draws them.

Validation's own draw (``random_inputs``: floats in [-2, 2)) suits one op. Through a model's layers at full
width it grows the activations by about the square root of each layer's fan-in: a Llama layer at d 4096 reaches
attention logits in the tens of thousands (a one-hot softmax, whose backward cancels), which no initialized or
trained model shows. Here each weight is N(0, 1 / fan-in) and each norm scale 1 + N(0, 0.01), as an
initialization keeps activations near unit scale through the depth; every other input keeps validation's draw
(so the inputs an op constrains keep theirs). Parameters are found by sigdnn.models' names: ``*.w`` and
``w*`` are weights (rank 2: [in, out], fan-in = in; a conv's [K, C, *R]: C x prod(R)), ``*.scale`` a norm's
scale.
"""

from __future__ import annotations

import math

import numpy as np

from sigdnn.accuracy.inputs import random_inputs
from sigdnn.dtypes import round_to
from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor


def is_weight(t: Tensor) -> bool:
    return t.rank >= 2 and (t.name.endswith(".w") or t.name.startswith("w"))


def fan_in(t: Tensor) -> int:
    """The inputs each output of the weight's layer sums: a linear [in, out] its in, a conv [K, C, *R] C R."""
    return t.dims[0] if t.rank == 2 else math.prod(t.dims[1:])


def initialized_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """One array per graph input (by name), validation's draw with weights and norm scales at a model's scale."""
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
