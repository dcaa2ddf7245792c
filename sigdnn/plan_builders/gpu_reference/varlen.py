"""Variable-length attention on the GPU reference: padding masks and ragged (token-packed) tensors.

The sequence lengths and ragged offsets (B and B + 1 elements) come back to
the host, are checked as the CPU reference checks them (``graph/ops/ragged.py``:
an ExecutionError naming the tensor) and become host-made masks and index
maps: a ragged input is gathered into its padded [B, H, S, E] form (0 past
each sequence's length), a padded output gathered back into the logical
array whose storage holds each sequence at its place (0 elsewhere), as the
CPU reference's unpack / pack. The math then sees padding masks only.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops import ragged
from sigdnn.graph.ops.sdpa import VARLEN_PORTS, Band
from sigdnn.plan_builders.gpu_reference.arrays import Array, offsets, where
from sigdnn.plan_builders.gpu_reference.backend import Gpu


class Varlen:
    """One run's sequence lengths and ragged placements for an attention node."""

    def __init__(self, node: Node, graph: Graph, ins: Mapping[str, Array | None]) -> None:
        read_back = {p: ins[p].host() for p in VARLEN_PORTS if ins.get(p) is not None}  # type: ignore[union-attr]
        self.lengths, self.places = ragged.layout(f"node '{node.name}'", node.op, graph.tensors, read_back)
        self.batch = graph.tensors[node.op.q].dims[0]

    def hidden(self, gpu: Gpu, band: Band, sq: int, skv: int) -> Array | None:
        """[B, 1, Sq, Skv]: 1 where a score is masked to -inf (the band, padding keys, padding rows); None: none is."""
        hidden = band.hidden(np.arange(sq), skv, sq, skv, self.lengths["seq_len_q"], self.lengths["seq_len_kv"])
        if hidden is None:
            return None
        hidden = np.broadcast_to(hidden[:, None], (self.batch, 1, sq, skv))
        return Array.from_host(gpu, hidden.astype(np.float64))

    def zero_outside(self, x: Array, port: str) -> Array:
        """x [B, H, S, E] with rows past the length ``port`` gives set to 0 (the CPU reference's operands)."""
        lengths = self.lengths[port]
        if lengths is None:
            return x
        outside = np.arange(x.shape[2])[None, None, :, None] >= lengths[:, None, None, None]
        return where(Array.from_host(x.gpu, outside.astype(np.float64)), 0.0, x)

    def unpack(self, ins: Mapping[str, Array | None], port: str) -> Array:
        """A ragged input's padded form (each sequence's elements, 0 past its length); others as read."""
        value = ins[port]
        if port not in self.places:
            return value  # type: ignore[return-value]
        t, pos, inside = self.places[port]
        logical = np.empty(t.size, dtype=np.int64)
        logical[offsets(t.dims, t.strides).reshape(-1)] = np.arange(t.size)  # storage position -> logical index
        index = np.where(inside, logical[np.where(inside, pos, 0)], -1)
        return value.reshape(-1).take(index)  # type: ignore[union-attr]

    def pack(self, port: str, value: Array) -> Array:
        """A padded output as the logical array whose storage holds each sequence at its place, 0 elsewhere."""
        if port not in self.places:
            return value
        t, pos, inside = self.places[port]
        mask = np.broadcast_to(inside, pos.shape)
        source = np.full(t.size, -1, dtype=np.int64)  # storage position -> flat index into the padded value
        source[pos[mask]] = np.flatnonzero(mask)
        return value.reshape(-1).take(source[offsets(t.dims, t.strides)])
