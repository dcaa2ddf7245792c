"""Read-only containers and the guard a planned graph's objects use to refuse changes.

A graph is planned once an executor has prepared it: from then on its
tensors, nodes and their containers refuse every change with
GraphFrozenError, so a plan never runs a graph that differs from the one it
was made for. Reading stays as it was.
"""

from __future__ import annotations

from typing import Any, NoReturn

from sigdnn.errors import GraphFrozenError


def refuse(what: str, change: str) -> NoReturn:
    raise GraphFrozenError(f"{what} belongs to a planned graph and cannot change ({change})")


def guard(instance: Any, attribute: Any, value: Any) -> Any:
    """attrs on_setattr hook of Graph, Tensor and Node: a planned one refuses every public attribute write."""
    if attribute.name[0] != "_" and getattr(instance, "frozen", False):  # Graph's is a property of its _frozen
        refuse(f"{type(instance).__name__.lower()} '{getattr(instance, 'name', '?')}'", f"set {attribute.name}")
    return value


class FrozenDict(dict):
    """A dict whose contents cannot change (a planned graph's tensors by uid)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        refuse("the tensor table", "a planned graph's tensors are fixed")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse  # type: ignore[assignment]


class FrozenList(list):
    """A list whose contents cannot change (a planned graph's nodes)."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        refuse("the node list", "a planned graph's nodes are fixed")

    __setitem__ = __delitem__ = append = extend = insert = pop = remove = clear = sort = reverse = _refuse  # type: ignore[assignment]
    __iadd__ = __imul__ = _refuse  # type: ignore[assignment]
