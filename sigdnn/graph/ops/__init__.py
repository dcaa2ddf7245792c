"""Op classes, one module per op; the op list is whatever modules this package holds.

Importing this package imports every op module in it (no hand-kept list),
so ``OP_CLASSES`` (kind -> class) names every op; an op class defined
elsewhere (a test, a plugin) joins it when its module is imported.
"""

from __future__ import annotations

import importlib
import pkgutil

from sigdnn.graph.ops.base import OP_CLASSES, Op, wire_member

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base":
        importlib.import_module(f"{__name__}.{_module.name}")

_by_wire: dict[int, type[Op]] = {}


def op_by_wire(member: int) -> type[Op] | None:
    """The op class of a NodeAttributes union member."""
    if len(_by_wire) != len(OP_CLASSES):
        _by_wire.clear()
        _by_wire.update({wire_member(cls): cls for cls in OP_CLASSES.values()})
    return _by_wire.get(member)


__all__ = ["OP_CLASSES", "Op", "op_by_wire"]
