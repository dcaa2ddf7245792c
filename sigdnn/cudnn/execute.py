"""cuDNN-frontend's variant pack -> sigdnn's: keys are cuDNN tensors or uids, values torch tensors or arrays.

Outputs are written into the buffers given, as cuDNN does (torch CPU
tensors and NumPy arrays in place on the reference; device tensors on the
GPU). A pass-by-value tensor whose value was not known when the graph was
built must be in the pack, and one baked into an op's attribute (epsilon,
momentum, attn_scale) may not change there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sigdnn.cudnn.tensor import tensor
from sigdnn.errors import VariantPackError
from sigdnn.graph.graph import Graph


def sigdnn_pack(graph: Graph, pack: Mapping[Any, Any], runtime: set[int], baked: dict[int, float]) -> dict[int, Any]:
    """uid -> buffer, from a pack keyed by cuDNN tensors or uids (None keys are skipped, as cuDNN does).

    ``runtime``: uids of pass-by-value tensors the pack must give; ``baked``:
    id of a cuDNN tensor -> the value built into an op (checked, not passed on).
    """
    if not isinstance(pack, Mapping):
        raise VariantPackError(f"execute(): the variant pack must be a dict, got {type(pack).__name__}")
    out: dict[int, Any] = {}
    for key, buffer in pack.items():
        if key is None:
            continue
        if isinstance(key, tensor) and id(key) in baked:
            _same_value(graph, key.get_name(), buffer, baked[id(key)])
            continue
        if isinstance(key, tensor):
            uid = key.get_uid()
            if key._planned is None or graph.tensors.get(uid) is not key._planned:
                raise VariantPackError(f"execute(): tensor '{key.get_name()}' is not a tensor of graph '{graph.name}'")
        elif isinstance(key, int) and not isinstance(key, bool):
            uid = key
        else:
            raise VariantPackError(f"execute(): variant pack keys are cudnn tensors or uids, got {key!r}")
        scalar = graph.tensors.get(uid)
        if scalar is not None and scalar.value is not None and hasattr(buffer, "detach"):
            buffer = buffer.detach().cpu().reshape(-1)[0].item()  # a torch scalar tensor, as cuDNN takes one
        out[uid] = buffer
    missing = sorted(runtime - set(out))
    if missing:
        names = ", ".join(f"'{graph.tensors[u].name}' (uid {u})" for u in missing)
        raise VariantPackError(f"execute(): pass-by-value tensor(s) {names} need a value in the variant pack")
    return out


def _same_value(graph: Graph, name: str, buffer: Any, value: float) -> None:
    given = np.asarray(buffer.detach().cpu() if hasattr(buffer, "detach") else buffer, dtype=np.float64).reshape(-1)
    if given.size != 1 or given[0] != value:
        raise VariantPackError(
            f"execute(): '{name}' was built into graph '{graph.name}' as {value}; "
            f"sigdnn cannot change it per execute (got {given.tolist()})"
        )
