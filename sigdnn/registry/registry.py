"""Registry: builders by key, built lazily and once, from three sources.

In-tree builder modules (each exposes ``builders()``), the
``sigdnn.plan_builders`` entry-point group of installed packages, and
runtime ``register(...)`` calls. A source that fails to load is recorded
with its reason instead of breaking ``import sigdnn``.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from typing import Any

from sigdnn.errors import RegistryError
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.registry.contracts import PlanBuilder
from sigdnn.registry.engine_ids import check_engine_id
from sigdnn.registry.ranking import rank
from sigdnn.signature_keys import SignatureKey

IN_TREE = (
    "sigdnn.plan_builders.reference",
    "sigdnn.plan_builders.cutile",
)
ENTRY_POINT_GROUP = "sigdnn.plan_builders"


def _as_builders(obj: Any) -> list[PlanBuilder]:
    """An entry point may give a builder, a builder class, or a callable returning builders."""
    if isinstance(obj, PlanBuilder):
        return [obj]
    if isinstance(obj, type) and issubclass(obj, PlanBuilder):
        return [obj()]
    if callable(obj):
        return _as_builders_list(obj())
    raise RegistryError(f"{obj!r} is not a PlanBuilder, a PlanBuilder class or a callable returning builders")


def _as_builders_list(items: Iterable[Any]) -> list[PlanBuilder]:
    out: list[PlanBuilder] = []
    for item in items if not isinstance(items, PlanBuilder) else [items]:
        out.extend(_as_builders(item))
    return out


class Registry:
    """Thread-safe, lazily built map from signature keys to ranked builders."""

    def __init__(self, modules: Iterable[str] = IN_TREE, entry_point_group: str | None = ENTRY_POINT_GROUP) -> None:
        self._modules = tuple(modules)
        self._group = entry_point_group
        self._lock = threading.RLock()
        self._loaded = False
        self._builders: dict[int, PlanBuilder] = {}
        self._pending: list[PlanBuilder] = []
        self.load_failures: dict[str, str] = {}  # source -> reason
        self.ranker: Callable[[list[PlanBuilder], Node, Graph], list[PlanBuilder]] = rank

    def _load(self) -> None:
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            for module in self._modules:
                try:
                    self._add_all(importlib.import_module(module).builders())
                except (ImportError, RegistryError) as e:
                    self.load_failures[module] = f"{type(e).__name__}: {e}"
            if self._group:
                for ep in entry_points(group=self._group):
                    try:
                        self._add_all(_as_builders(ep.load()))
                    except Exception as e:  # a broken plugin must not break sigdnn
                        self.load_failures[f"entry point {ep.name} ({ep.value})"] = f"{type(e).__name__}: {e}"
            self._add_all(self._pending)
            self._pending.clear()
            self._loaded = True

    def _add_all(self, builders: Iterable[PlanBuilder]) -> None:
        for b in builders:
            self._add(b)

    def _add(self, builder: PlanBuilder, replace: bool = False) -> None:
        check_engine_id(builder.backend, builder.engine_id, builder.name)
        old = self._builders.get(builder.engine_id)
        if old is not None and not replace:
            raise RegistryError(
                f"engine id {builder.engine_id} is taken by '{old.name}'; cannot register '{builder.name}'"
            )
        clash = next(
            (b for b in self._builders.values() if b.name == builder.name and b.engine_id != builder.engine_id), None
        )
        if clash is not None:
            raise RegistryError(f"builder name '{builder.name}' is taken by engine {clash.engine_id}")
        self._builders[builder.engine_id] = builder

    def register(self, builder: PlanBuilder, *, replace: bool = False) -> PlanBuilder:
        """Add a builder at runtime (before or after the registry has loaded)."""
        with self._lock:
            if self._loaded:
                self._add(builder, replace)
            else:
                check_engine_id(builder.backend, builder.engine_id, builder.name)
                self._pending.append(builder)
        return builder

    def unregister(self, engine_id: int) -> None:
        with self._lock:
            self._load()
            self._builders.pop(engine_id, None)

    def builders(self) -> list[PlanBuilder]:
        """Every registered builder, available or not, by engine id."""
        self._load()
        return [self._builders[k] for k in sorted(self._builders)]

    def find(self, engine: int | str) -> PlanBuilder:
        """A builder by engine id or name; RegistryError when none has it."""
        self._load()
        for b in self._builders.values():
            if b.engine_id == engine or b.name == engine:
                return b
        raise RegistryError(f"no builder has engine id or name {engine!r}")

    def candidates(self, key: SignatureKey, device: str, node: Node, graph: Graph) -> list[PlanBuilder]:
        """Available builders for ``device`` that serve ``key``, best first."""
        self._load()
        found = [b for b in self._builders.values() if b.device == device and b.serves(key) and b.available() is None]
        return self.ranker(found, node, graph)


DEFAULT_REGISTRY = Registry()


def register(builder: PlanBuilder, *, replace: bool = False) -> PlanBuilder:
    """Register a builder with the default registry (usable as a decorator on instances)."""
    return DEFAULT_REGISTRY.register(builder, replace=replace)
