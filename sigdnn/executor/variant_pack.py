"""Variant pack: the caller's buffers by tensor name or uid, matched to the graph."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sigdnn.errors import VariantPackError
from sigdnn.graph.graph import Graph


def resolve_pack(graph: Graph, pack: Mapping[Any, Any], inputs: list[int], outputs: list[int]) -> dict[int, Any]:
    """uid -> buffer; VariantPackError for unknown, virtual, doubled or missing entries."""
    if not isinstance(pack, Mapping):
        raise VariantPackError(
            f"variant pack must be a mapping of tensor name or uid to buffer, got {type(pack).__name__}"
        )
    names = {t.name: uid for uid, t in graph.tensors.items()}
    resolved: dict[int, Any] = {}
    for key, buffer in pack.items():
        if isinstance(key, str):
            uid = names.get(key)
        elif isinstance(key, int) and not isinstance(key, bool):
            uid = key if key in graph.tensors else None
        else:
            raise VariantPackError(f"variant pack key {key!r} is neither a tensor name nor a uid")
        if uid is None:
            raise VariantPackError(f"variant pack has an extra entry {key!r}: graph '{graph.name}' has no such tensor")
        t = graph.tensors[uid]
        if t.is_virtual:
            raise VariantPackError(
                f"variant pack entry {key!r}: tensor '{t.name}' is virtual; the executor allocates it"
            )
        if uid in resolved:
            raise VariantPackError(f"variant pack names tensor '{t.name}' (uid {uid}) twice")
        resolved[uid] = buffer
    missing = [graph.tensors[u].name for u in inputs if u not in resolved]
    if missing:
        raise VariantPackError(f"variant pack is missing input tensor(s) {', '.join(repr(m) for m in missing)}")
    return resolved
