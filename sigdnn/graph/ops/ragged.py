"""Variable-length attention batches: padding masks and ragged (token-packed, "THD") tensors.

``seq_len_q`` / ``seq_len_kv`` hold one length per batch entry (B elements,
int32 or int64): query rows s >= seq_len_q[b] and keys s >= seq_len_kv[b]
lie outside batch entry b's sequence. A ragged offset tensor (B + 1
elements, int32 or int64, cuDNN's ``set_ragged_offset``) relocates each
sequence of a [B, H, S, E] tensor: element (b, h, s, e) lives at
offsets[b] + h * stride_h + s * stride_s + e * stride_e elements from the
buffer's start, the declared batch stride unused; with BSHD strides and
offsets the running sum of length * H * E this is the token-packed layout
[total_tokens, H, E]. Only positions inside a sequence are addressed: what
an output holds elsewhere (padding rows, the buffer past the last sequence)
is unspecified, and validation does not compare it.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import numpy as np

from sigdnn.errors import ExecutionError, GraphError, UsageError
from sigdnn.graph.layout import is_non_overlapping, span_elements
from sigdnn.graph.ops.shapes import described
from sigdnn.graph.tensor import Tensor

LENGTH_PORTS = ("seq_len_q", "seq_len_kv")
OFFSET_SUFFIX = "_ragged_offset"
RAGGED_TENSORS = ("q", "k", "v", "o")
GRADIENT_OF = {"dq": "q", "dk": "k", "dv": "v", "d_o": "o"}  # each placed by its forward tensor's ragged offsets
Place = tuple[Tensor, np.ndarray, np.ndarray]  # (the tensor, storage positions [B, H, S, E], inside [B, 1, S, 1])


def varlen_inputs(
    seq_len_q: Tensor | None, seq_len_kv: Tensor | None, offsets: Mapping[str, Tensor] | None
) -> dict[str, Tensor | None]:
    """The attention ports of the builder's ``seq_len_q``, ``seq_len_kv`` and ``ragged_offsets`` arguments."""
    offsets = dict(offsets or {})
    unknown = sorted(set(offsets) - set(RAGGED_TENSORS))
    if unknown:
        raise UsageError(f"ragged_offsets takes the keys {list(RAGGED_TENSORS)}, not {unknown}")
    found: dict[str, Tensor | None] = {"seq_len_q": seq_len_q, "seq_len_kv": seq_len_kv}
    found.update({p + OFFSET_SUFFIX: offsets.get(p) for p in RAGGED_TENSORS})
    return found


def require_index(where: str, port: str, t: Tensor, size: int, what: str) -> None:
    """An int32 / int64 tensor of ``size`` elements (any dims, as cuDNN's [B, 1, 1, 1])."""
    if t.dtype is not None and t.dtype.name not in ("INT32", "INT64"):
        raise GraphError(f"{where}: {described(port, t)} must be int32 or int64 ({what}), is {t.dtype}")
    if t.size != size:
        raise GraphError(f"{where}: {described(port, t)} has {t.size} elements, expected {size} ({what})")


def check_varlen(
    where: str, inputs: Mapping[str, Tensor], tensors: Mapping[str, Tensor], lengths: Mapping[str, str]
) -> None:
    """Padding lengths and ragged offsets of an attention node.

    ``tensors``: the ported tensors a ragged offset may relocate (q, k, v, o);
    ``lengths``: each of them -> the length port its sequences follow.
    """
    batch = inputs["q"].dims[0]
    for port in LENGTH_PORTS:
        if port in inputs:
            require_index(where, port, inputs[port], batch, "one sequence length per batch entry")
    for port, t in tensors.items():
        offsets = inputs.get(port + OFFSET_SUFFIX)
        if offsets is None:
            continue
        name = port + OFFSET_SUFFIX
        require_index(where, name, offsets, batch + 1, "one element offset per batch entry, plus the total")
        if lengths[port] not in inputs:
            raise GraphError(f"{where}: {described(name, offsets)} needs {lengths[port]}: a ragged tensor's lengths")
        if span_elements(t.dims, t.strides) != t.size or not is_non_overlapping(t.dims, t.strides):
            raise GraphError(
                f"{where}: ragged {described(port, t)} has strides {list(t.strides)}; a ragged tensor is packed "
                "(no gaps, no overlap)"
            )


def placed_by(port: str, ports: Collection[str]) -> tuple[str, ...]:
    """The node's ports (among ``ports``) that ``port``'s ragged offsets place: itself and its gradients."""
    return tuple(p for p in (port, *(g for g, f in GRADIENT_OF.items() if f == port)) if p in ports)


CHECKED_AT_PREPARE = 1 << 22  # elements of a ragged tensor whose constant places are checked with the graph


def check_constant_places(
    where: str, tensors: Mapping[str, Tensor], outputs: Collection[str], lengths: Mapping[str, str]
) -> None:
    """Where a ragged tensor's offsets and lengths are graph constants, its places are checked with the graph (a
    GraphError when it is prepared, not an ExecutionError at every run): each sequence inside the buffer, no two
    sequences of an output sharing an element. ``tensors``: the node's tensors by port; ``outputs``: its output
    ports; ``lengths``: q, k, v, o -> the length port each follows. Tensors past CHECKED_AT_PREPARE elements are
    left to the run (the check holds a position per element)."""
    bounds = {"seq_len_q": tensors["q"].dims[2], "seq_len_kv": tensors["k"].dims[2]}
    for port in RAGGED_TENSORS:
        offsets, length = tensors.get(port + OFFSET_SUFFIX), tensors.get(lengths[port])
        if offsets is None or length is None or not (offsets.is_constant and length.is_constant):
            continue
        placed = placed_by(port, tensors)
        if any(tensors[p].size > CHECKED_AT_PREPARE for p in placed):
            continue
        try:
            found = lengths_of(where, length.name, length.constant(), bounds[lengths[port]])
            for p in placed:
                positions(where, offsets.name, tensors[p], offsets.constant(), found, p in outputs)
        except ExecutionError as e:
            raise GraphError(str(e)) from None


def ragged_ports(op: object) -> tuple[str, ...]:
    """The tensors (q, k, v, o) that have a ragged offset on ``op``."""
    return tuple(p for p in RAGGED_TENSORS if getattr(op, p + OFFSET_SUFFIX) is not None)


def lengths_of(where: str, name: str, values: np.ndarray, bound: int) -> np.ndarray:
    """Sequence lengths as int64 [B]; ExecutionError naming the tensor unless each is in [0, bound]."""
    lengths = np.asarray(values).astype(np.int64).reshape(-1)
    bad = np.flatnonzero((lengths < 0) | (lengths > bound))
    if bad.size:
        raise ExecutionError(
            f"{where}: tensor '{name}' holds length {int(lengths[bad[0]])} at batch {int(bad[0])}; "
            f"lengths lie in [0, {bound}]"
        )
    return lengths


def positions(
    where: str, name: str, t: Tensor, offsets: np.ndarray, lengths: np.ndarray, output: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(storage positions [B, H, S, E] int64, inside [B, 1, S, 1] bool) of a ragged tensor's elements.

    ExecutionError naming the tensor when a sequence's elements fall outside the buffer, or when two
    sequences of an output share an element (the result would depend on the order of writes).
    """
    off = np.asarray(offsets).astype(np.int64).reshape(-1)
    _, sh, ss, se = t.strides
    _, nh, ns, ne = t.dims
    base = off[: t.dims[0], None, None, None]  # the last entry (the total) places nothing
    inner = np.arange(nh)[None, :, None, None] * sh + np.arange(ns)[None, None, :, None] * ss + np.arange(ne) * se
    pos = base + inner
    inside = np.arange(ns)[None, None, :, None] < lengths[:, None, None, None]
    span = t.size
    used = pos[np.broadcast_to(inside, pos.shape)]
    if used.size and (used.min() < 0 or used.max() >= span):
        b = int(np.flatnonzero(np.any(((pos < 0) | (pos >= span)) & inside, axis=(1, 2, 3)))[0])
        raise ExecutionError(
            f"{where}: tensor '{name}' places sequence {b} (offset {int(off[b])}, length {int(lengths[b])}) "
            f"outside tensor '{t.name}''s {span} elements"
        )
    if output and used.size and np.bincount(used, minlength=span).max() > 1:
        raise ExecutionError(f"{where}: tensor '{name}' makes sequences of output '{t.name}' overlap")
    return pos, inside


def token_major(dims: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """Packed strides of a [B, H, S, E] tensor stored [B, S, H, E]: how ragged sequences lie, token by token."""
    _, h, s, e = dims
    return (s * h * e, e, h * e, 1)


def layout(
    where: str, op: Any, tensors: Mapping[int, Tensor], values: Mapping[str, np.ndarray]
) -> tuple[dict[str, np.ndarray | None], dict[str, Place]]:
    """One run's sequence lengths (int64 [B] per length port, None without one) and the place of every tensor a
    ragged offset relocates (q / k / v / o and the gradients they place), from the length and offset ``values``
    by port; ExecutionError naming the tensor for a length out of range or a sequence outside its buffer."""
    q, k = tensors[op.q], tensors[op.k]
    lengths: dict[str, np.ndarray | None] = {}
    for port, bound in (("seq_len_q", q.dims[2]), ("seq_len_kv", k.dims[2])):
        uid = getattr(op, port)
        lengths[port] = None if uid is None else lengths_of(where, tensors[uid].name, values[port], bound)
    places: dict[str, Place] = {}
    ports = op.ports()
    outputs = op.outputs()
    for port in ragged_ports(op):
        name = tensors[getattr(op, port + OFFSET_SUFFIX)].name
        length = lengths["seq_len_q" if port in ("q", "o") else "seq_len_kv"]
        for placed in placed_by(port, ports):
            t = tensors[ports[placed]]
            places[placed] = (t, *positions(where, name, t, values[port + OFFSET_SUFFIX], length, placed in outputs))
    return lengths, places


def storage(values: np.ndarray, t: Tensor) -> np.ndarray:
    """A packed tensor's elements in storage order (position p at index p)."""
    flat = np.empty(t.size, dtype=values.dtype)
    _strided(flat, t)[...] = values
    return flat


def _strided(flat: np.ndarray, t: Tensor) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(flat, t.dims, tuple(s * flat.itemsize for s in t.strides), writeable=True)


def unpack(values: np.ndarray, t: Tensor, pos: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """The [B, H, S, E] tensor the ragged layout describes: each sequence's elements, 0 past its length."""
    flat = storage(values, t)
    return np.where(inside, flat[np.where(inside, pos, 0)], 0)


def pack(padded: np.ndarray, t: Tensor, pos: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """The logical [B, H, S, E] array whose storage holds each sequence of ``padded`` at its place (0 elsewhere)."""
    flat = np.zeros(t.size, dtype=padded.dtype)
    mask = np.broadcast_to(inside, pos.shape)
    flat[pos[mask]] = padded[mask]
    return _strided(flat, t).copy()


def unaddressed(t: Tensor, pos: np.ndarray, inside: np.ndarray) -> np.ndarray:
    """Bool [B, H, S, E] in logical order: True at the elements no in-sequence position addresses."""
    used = np.zeros(t.size, dtype=bool)
    used[pos[np.broadcast_to(inside, pos.shape)]] = True
    return ~_strided(used, t)


def padding_rows(dims: tuple[int, ...], lengths: np.ndarray) -> np.ndarray:
    """Bool [B, H, S, E] of a padded (not ragged) tensor: True in rows s >= lengths[b]."""
    rows = np.arange(dims[2])[None, None, :, None] >= lengths[:, None, None, None]
    return np.broadcast_to(rows, dims)


def unspecified_outputs(
    values: Mapping[str, np.ndarray], tensors: Mapping[str, Tensor], placement: Mapping[str, tuple[str | None, str]]
) -> dict[str, np.ndarray]:
    """Masks of the output elements outside every sequence (op.unspecified for attention).

    ``placement``: output port -> (the tensor whose ragged offsets place it, or None; its length port).
    """
    masks = {}
    for out, (placed_by, length_port) in placement.items():
        if out not in tensors or length_port not in values:
            continue
        t = tensors[out]
        lengths = np.asarray(values[length_port]).astype(np.int64).reshape(-1)  # checked by the run that made them
        offsets = values.get(f"{placed_by}{OFFSET_SUFFIX}")
        if offsets is None:
            masks[out] = padding_rows(t.dims, lengths)
        else:
            pos, inside = positions("validation", f"{placed_by}{OFFSET_SUFFIX}", t, offsets, lengths, False)
            masks[out] = unaddressed(t, pos, inside)
    return masks


def random_varlen(
    tensors: Mapping[str, Tensor],
    rng: np.random.Generator,
    lengths: Mapping[str, str],
    given: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Random lengths in [1, S] and, for ragged tensors, sequences packed one after another (validation's draw).

    Where one offsets tensor places several tensors (an o that shares q's offsets), each sequence takes the
    largest room any of them asks, so that none of their sequences overlaps the next. ``given`` (port -> what
    earlier nodes drew): its lengths are kept, and offsets they drew keep at least the room they gave."""
    given = given or {}
    drawn: dict[str, np.ndarray] = {}
    bounds = {"seq_len_q": tensors["q"].dims[2], "seq_len_kv": tensors["k"].dims[2]}
    ports = [p for p in bounds if p in tensors]
    for port in ports:
        # one tensor given for both ports is one draw, within both bounds (each port's value is that tensor's)
        same = [p for p in ports if tensors[p].uid == tensors[port].uid]
        known = next((given[p] for p in same if p in given), None)
        if known is not None:
            drawn[port] = np.asarray(known).astype(np.int64).reshape(-1)
        elif (first := next((p for p in same if p in drawn), None)) is not None:
            drawn[port] = drawn[first]
        else:
            drawn[port] = rng.integers(1, min(bounds[p] for p in same) + 1, size=tensors[port].size)
    rooms: dict[int, list[tuple[str, np.ndarray]]] = {}  # offsets uid -> (its port, the room it asks) per tensor
    for port, length_port in lengths.items():
        name = port + OFFSET_SUFFIX
        if name not in tensors or length_port not in drawn or port not in tensors:
            continue
        for placed in placed_by(port, tensors):  # the tensor and its gradients, each in its own layout
            t = tensors[placed]
            _, sh, ss, se = t.strides
            token_major = ss >= max(sh, se)  # BSHD: sequences packed end to end; else each at its batch stride
            step = drawn[length_port] * ss if token_major else np.full(t.dims[0], t.strides[0])
            rooms.setdefault(tensors[name].uid, []).append((name, step))
    for asks in rooms.values():
        names = dict.fromkeys(name for name, _ in asks)  # (each offsets port once, in order)
        earlier = [np.diff(np.asarray(given[name]).astype(np.int64).reshape(-1)) for name in names if name in given]
        # an earlier node's sequences keep their room (gaps are harmless)
        room = np.maximum.reduce([step for _, step in asks] + [e[: asks[0][1].size] for e in earlier])
        for name in names:
            drawn[name] = np.concatenate([[0], np.cumsum(room)])
    return {p: v.reshape(tensors[p].dims).astype(tensors[p].dtype.numpy) for p, v in drawn.items()}
