"""Variant pack: the caller's buffers by tensor name, uid or Tensor object, matched to the graph."""

from __future__ import annotations

import difflib
import operator
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sigdnn.errors import GraphError, VariantPackError
from sigdnn.graph.arguments import scalar_value
from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor


def _uid_of(key: Any) -> int | None:
    """An integer key (Python or NumPy) as a uid; None for anything else. bool is not a uid."""
    if isinstance(key, (bool, np.bool_)):
        return None
    try:
        return operator.index(key)
    except TypeError:
        return None


def _scalar(graph: Graph, t: Tensor, buffer: Any) -> np.ndarray:
    """A pass-by-value override as one 0-d value of the tensor's dtype, checked before anything runs."""
    try:
        return scalar_value(buffer, graph.dtype_of(t), f"pass-by-value tensor '{t.name}' (uid {t.uid})")
    except GraphError as e:
        raise VariantPackError(str(e)) from None


def _suggestion(key: Any, graph: Graph, inputs: Sequence[int], outputs: Sequence[int]) -> str:
    """The names a pack may use, and the closest one when the key is a misspelt name."""
    valid = [graph.tensors[u].name for u in (*inputs, *outputs)]
    valid += [t.name for t in graph.tensors.values() if t.value is not None or t.data is not None]
    close = difflib.get_close_matches(str(getattr(key, "name", key)), valid, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    return f"{hint} (inputs and outputs: {', '.join(repr(n) for n in valid)})"


def resolve_pack(
    graph: Graph,
    pack: Mapping[Any, Any],
    inputs: Sequence[int],
    outputs: Sequence[int],
    names: Mapping[str, int] | None = None,
) -> dict[int, Any]:
    """uid -> buffer (scalar overrides as 0-d values); VariantPackError for unknown, virtual, doubled or missing entries.

    ``names`` (tensor name -> uid) may come precomputed from the plan.
    """
    if type(pack) is not dict and not isinstance(pack, Mapping):  # a dict skips the ABC check (per execute)
        raise VariantPackError(
            f"variant pack must be a mapping of tensor name or uid to buffer, got {type(pack).__name__}"
        )
    if names is None:
        names = {t.name: uid for uid, t in graph.tensors.items()}
    resolved: dict[int, Any] = {}
    try:
        entries = list(pack.items())
    except Exception as e:  # a mapping whose iteration raises is the caller's bug, reported as one
        raise VariantPackError(f"variant pack could not be read: {type(e).__name__}: {e}") from None
    for key, buffer in entries:
        if isinstance(key, Tensor):
            uid = key.uid if graph.tensors.get(key.uid) is not None else None
        elif isinstance(key, str):
            uid = names.get(key)
        else:
            uid = _uid_of(key)
            if uid is None:
                raise VariantPackError(f"variant pack key {key!r} is neither a tensor name, a uid nor a Tensor")
            uid = uid if uid in graph.tensors else None
        if uid is None:
            raise VariantPackError(
                f"variant pack has an extra entry {key!r}: graph '{graph.name}' has no such tensor"
                + _suggestion(key, graph, inputs, outputs)
            )
        t = graph.tensors[uid]
        if t.is_virtual:
            raise VariantPackError(
                f"variant pack entry {key!r}: tensor '{t.name}' is virtual; the executor allocates it"
            )
        if uid in resolved:
            raise VariantPackError(f"variant pack names tensor '{t.name}' (uid {uid}) twice")
        resolved[uid] = _scalar(graph, t, buffer) if t.value is not None else buffer
    missing = [f"'{graph.tensors[u].name}' (uid {u})" for u in inputs if u not in resolved]
    if missing:
        raise VariantPackError(f"variant pack is missing input tensor(s) {', '.join(missing)}")
    return resolved
