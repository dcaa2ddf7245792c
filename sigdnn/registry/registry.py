"""Registry: builders indexed by op, built lazily and once, from three sources.

In-tree builder packages (every concrete PlanBuilder class defined in one of
their modules; no hand-kept lists), the ``sigdnn.plan_builders`` entry-point
group of installed packages, and runtime ``register(...)`` calls. A source
that fails to load is recorded with its reason instead of breaking
``import sigdnn``; a registration that fails raises RegistryError and leaves
the registry as it was.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import threading
from collections.abc import Callable, Iterable
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any, TypeVar

from sigdnn.errors import RegistryError
from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.registry.contracts import FusionBuilder, PlanBuilder
from sigdnn.registry.engine_ids import IN_TREE, check_engine_id
from sigdnn.registry.ranking import rank
from sigdnn.signature_keys import SignatureKey

IN_TREE_PACKAGES = (
    "sigdnn.plan_builders.reference",
    "sigdnn.plan_builders.cutile",
    "sigdnn.plan_builders.cute",
    "sigdnn.plan_builders.gpu_reference",
)
CPU_PACKAGES = frozenset({"sigdnn.plan_builders.reference"})  # the other in-tree packages hold GPU builders
ENTRY_POINT_GROUP = "sigdnn.plan_builders"
B = TypeVar("B")


def builders_in(module: ModuleType) -> list[PlanBuilder]:
    """One instance of each concrete PlanBuilder class the module defines."""
    found = []
    for _, cls in inspect.getmembers(module, inspect.isclass):
        concrete = issubclass(cls, PlanBuilder) and not inspect.isabstract(cls) and hasattr(cls, "engine_id")
        if concrete and cls.__module__ == module.__name__:
            found.append(cls())
    return found


def _device_of(package: str) -> str:
    return "cpu" if package in CPU_PACKAGES else "gpu"


def _package_builders(package: str) -> list[PlanBuilder]:
    """Builders of every module of an in-tree package (subpackages hold kernels, not builders)."""
    pkg = importlib.import_module(package)
    found = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if not info.ispkg and not info.name.startswith("_"):
            found.extend(builders_in(importlib.import_module(f"{package}.{info.name}")))
    for b in found:
        if IN_TREE.get(b.name) != b.engine_id:
            raise RegistryError(
                f"in-tree builder '{b.name}' has engine id {b.engine_id}; "
                "in-tree ids come from sigdnn.registry.engine_ids.IN_TREE"
            )
    return found


def _as_builders(obj: Any) -> list[PlanBuilder]:
    """An entry point may give a builder, a builder class, or a callable returning builders."""
    if isinstance(obj, PlanBuilder):
        return [obj]
    if isinstance(obj, type) and issubclass(obj, PlanBuilder):
        return [obj()]
    if callable(obj):
        items = obj()
        if isinstance(items, PlanBuilder):
            return [items]
        return [b for item in items for b in _as_builders(item)]
    raise RegistryError(f"{obj!r} is not a PlanBuilder, a PlanBuilder class or a callable returning builders")


class Registry:
    """Thread-safe, lazily built index: op kind -> builders that serve it; plus the fusion builders."""

    def __init__(
        self, packages: Iterable[str] = IN_TREE_PACKAGES, entry_point_group: str | None = ENTRY_POINT_GROUP
    ) -> None:
        self._packages = tuple(packages)
        self._group = entry_point_group
        self._lock = threading.RLock()
        self._loaded = False  # every source loaded
        self._loaded_sources: set[str] = set()
        self._by_id: dict[int, PlanBuilder] = {}
        self._by_name: dict[str, PlanBuilder] = {}
        self._by_op: dict[str, list[PlanBuilder]] = {}
        self._fusion: list[FusionBuilder] = []
        self.load_failures: dict[str, str] = {}  # source -> reason
        self.ranker: Callable[[list[PlanBuilder], Node, Graph], list[PlanBuilder]] = rank

    def _load(self, device: str | None = None) -> None:
        """Load the sources not loaded yet: all of them, or for ``device`` only its in-tree packages and the
        entry points (a reference run then never imports the GPU builders' modules: start-up time)."""
        if self._loaded:
            return
        with self._lock:
            if self._loaded:
                return
            try:
                for package in self._packages:
                    if package not in self._loaded_sources and device in (None, _device_of(package)):
                        self._loaded_sources.add(package)
                        self._add_source(package, lambda p=package: _package_builders(p))
                if self._group and ENTRY_POINT_GROUP not in self._loaded_sources:
                    self._loaded_sources.add(ENTRY_POINT_GROUP)
                    for ep in entry_points(group=self._group):
                        self._add_source(f"entry point {ep.name} ({ep.value})", lambda ep=ep: _as_builders(ep.load()))
            finally:
                self._loaded = device is None or set(self._packages) <= self._loaded_sources

    def _add_source(self, source: str, load: Callable[[], list[PlanBuilder]]) -> None:
        """Add every builder of one source, or none of them: a broken source must not break sigdnn."""
        try:
            builders = load()
            for b in builders:
                self._check_new(b, replace=False)
            if len({b.engine_id for b in builders}) != len(builders):
                raise RegistryError("two of its builders share an engine id")
        except Exception as e:
            self.load_failures[source] = f"{type(e).__name__}: {e}"
            return
        for b in builders:
            self._insert(b)

    def _check_new(self, builder: Any, replace: bool) -> None:
        if not isinstance(builder, PlanBuilder):
            raise RegistryError(f"{builder!r} is not a PlanBuilder")
        for attribute in ("name", "engine_id", "library"):
            if not hasattr(builder, attribute):
                raise RegistryError(f"builder {type(builder).__name__} does not declare '{attribute}'")
        check_engine_id(builder.library, builder.engine_id, builder.name)
        old = self._by_id.get(builder.engine_id)
        if old is not None and not replace:
            raise RegistryError(
                f"engine id {builder.engine_id} is taken by '{old.name}'; cannot register '{builder.name}'"
            )
        clash = self._by_name.get(builder.name)
        if clash is not None and clash.engine_id != builder.engine_id:
            raise RegistryError(f"builder name '{builder.name}' is taken by engine {clash.engine_id}")

    def _insert(self, builder: PlanBuilder) -> None:
        self._remove(builder.engine_id)
        self._by_id[builder.engine_id] = builder
        self._by_name[builder.name] = builder
        for op in builder.ops:
            self._by_op.setdefault(op, []).append(builder)
        if isinstance(builder, FusionBuilder):
            self._fusion.append(builder)

    def _remove(self, engine_id: int) -> None:
        old = self._by_id.pop(engine_id, None)
        if old is None:
            return
        del self._by_name[old.name]
        for op in old.ops:
            self._by_op[op].remove(old)
        if old in self._fusion:
            self._fusion.remove(old)

    def register(self, builder: B, *, replace: bool = False) -> B:
        """Add a builder (an instance, or a class with a no-argument constructor) and return it.

        Works as a class decorator. RegistryError, with the registry left
        as it was, when its engine id or name is taken (unless ``replace``)
        or out of its library's range.
        """
        instance = builder() if isinstance(builder, type) and issubclass(builder, PlanBuilder) else builder
        with self._lock:
            self._load()
            self._check_new(instance, replace)
            self._insert(instance)  # type: ignore[arg-type]
        return builder

    def unregister(self, engine_id: int) -> None:
        with self._lock:
            self._load()
            self._remove(engine_id)

    def builders(self) -> list[PlanBuilder]:
        """Every registered builder, available or not, by engine id."""
        self._load()
        return [self._by_id[k] for k in sorted(self._by_id)]

    def find(self, engine: int | str) -> PlanBuilder:
        """A builder by engine id or name; RegistryError when none has it."""
        self._load()
        found = self._by_name.get(engine) if isinstance(engine, str) else self._by_id.get(engine)
        if found is None:
            raise RegistryError(f"no builder has engine id or name {engine!r}")
        return found

    def serving(self, key: SignatureKey, device: str) -> list[PlanBuilder]:
        """Every builder for ``device`` written for ``key``, available or not."""
        self._load(device)
        return [b for b in self._by_op.get(key.op, ()) if b.device == device and b.serves(key)]

    def candidates(
        self,
        key: SignatureKey,
        device: str,
        node: Node,
        graph: Graph,
        ranker: Callable[[list[PlanBuilder], Node, Graph], list[PlanBuilder]] | None = None,
    ) -> list[PlanBuilder]:
        """Available builders for ``device`` that serve ``key``, best first (by ``ranker``, else the registry's)."""
        found = [b for b in self.serving(key, device) if b.available() is None]
        return (ranker or self.ranker)(found, node, graph)

    def fusion_builders(self, device: str) -> list[FusionBuilder]:
        """Available fusion builders for ``device``, best first."""
        self._load(device)
        found = [b for b in self._fusion if b.device == device and b.available() is None]
        return sorted(found, key=lambda b: (-b.priority, b.engine_id))


DEFAULT_REGISTRY = Registry()
# The truth side of validation and of autotune's check: sigdnn's own reference builders only. A CPU plugin
# registered in the default registry (an entry point, say) must never be judged against itself.
REFERENCE_ONLY = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)


def register(builder: B, *, replace: bool = False) -> B:
    """Register a builder instance or class with the default registry (works as a class decorator)."""
    return DEFAULT_REGISTRY.register(builder, replace=replace)
