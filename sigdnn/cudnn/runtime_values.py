"""Pass-by-value parameters whose value comes with each execute: cuDNN-frontend's epsilon, momentum, attn_scale.

cuDNN-frontend declares them as ``graph.tensor(..., is_pass_by_value=True)`` and gives their values in the
variant pack. sigdnn's ops hold these parameters as attributes, so the pygraph plans its graph with a placeholder
and each execute builds the values its pack gives into a copy of the graph, prepared by the same executor and run
with the plan-list entry the pygraph built (kept per set of values, so a value met again costs a lookup). Each
value is checked first: one element (shape () or every dim 1) of the tensor's declared data type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from sigdnn.cudnn.enums import to_sigdnn
from sigdnn.cudnn.tensor import tensor
from sigdnn.dtypes import as_data_type
from sigdnn.errors import GraphError, VariantPackError
from sigdnn.graph.arguments import scalar_value


class PassByValueError(VariantPackError):
    """A pass-by-value parameter's value is missing from the variant pack, or not one value of its data type."""


def take_values(runtime: Mapping[int, tensor], pack: Mapping[Any, Any]) -> tuple[dict[int, float], dict[Any, Any]]:
    """(id of each parameter in ``runtime`` -> its checked value; the pack less the entries only they read).

    A parameter is keyed by its cudnn tensor or by the uid set on it; one that is also an op's input port stays
    in the pack, where that port reads it.
    """
    if not isinstance(pack, Mapping):
        raise VariantPackError(f"execute(): the variant pack must be a dict, got {type(pack).__name__}")
    by_uid = {t.get_uid(): t for t in runtime.values() if t.get_uid() >= 0}  # -1: no uid set
    values: dict[int, float] = {}
    rest: dict[Any, Any] = {}
    for key, buffer in pack.items():
        found = runtime.get(id(key)) if isinstance(key, tensor) else None
        if found is None and isinstance(key, int) and not isinstance(key, bool):
            found = by_uid.get(key)
        if found is None:
            rest[key] = buffer
            continue
        if id(found) in values:
            raise PassByValueError(f"execute(): the variant pack gives pass-by-value '{found.get_name()}' twice")
        values[id(found)] = checked_value(found, buffer)
        if found._planned is not None:
            rest[key] = buffer
    missing = [t.get_name() for i, t in runtime.items() if i not in values]
    if missing:
        raise PassByValueError(
            f"execute(): pass-by-value tensor(s) {', '.join(repr(n) for n in missing)} need a value in the variant "
            "pack (a one-element tensor of their data type)"
        )
    return values, rest


def checked_value(t: tensor, buffer: Any) -> float:
    """The value of pass-by-value ``t`` in a pack: a number, or one element (shape () or every dim 1) of its dtype."""
    declared = to_sigdnn(t._data_type, f"tensor '{t.get_name()}' data_type")
    where = f"execute(): pass-by-value tensor '{t.get_name()}' ({declared})"
    if isinstance(buffer, (int, float)) and not isinstance(buffer, bool):
        try:
            return float(scalar_value(buffer, declared, where))
        except GraphError as e:
            raise PassByValueError(str(e)) from None
    if hasattr(buffer, "detach") and hasattr(buffer, "dtype"):  # a torch tensor
        dims, given, array = tuple(buffer.shape), buffer.dtype, buffer.detach().cpu()
    elif isinstance(buffer, (np.ndarray, np.generic)):
        dims, given, array = np.shape(buffer), buffer.dtype, np.asarray(buffer)
    else:
        raise PassByValueError(
            f"{where}: expected a number, a torch tensor or a NumPy array, got {type(buffer).__name__}"
        )
    if any(d != 1 for d in dims):
        raise PassByValueError(f"{where} takes one value (shape () or every dim 1), got shape {list(dims)}")
    try:
        dtype = as_data_type(given)
    except (KeyError, ValueError, TypeError):
        dtype = None
    if dtype != declared:
        raise PassByValueError(f"{where}: the variant pack gives a {given} value, not {declared}")
    return float(array.item())
