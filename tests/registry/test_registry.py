"""Registry: lazy loading, engine-id ranges, ranking, pinning, entry points, declines."""

from __future__ import annotations

import threading
from importlib.metadata import EntryPoint
from typing import Any, ClassVar

import numpy as np
import pytest

import sigdnn
from sigdnn.errors import NoPlanError, NotSupported, RegistryError
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.registry import registry as registry_module


class NegatePlan(NodePlan):
    """Writes -x whatever the mode: proves which builder ran."""

    def execute(self, buffers: Any, context: Any = None) -> None:
        buffers["out_0"][...] = -buffers["in_0"]


class PluginPointwise(PlanBuilder):
    name: ClassVar[str] = "plugin.negate"
    engine_id: ClassVar[int] = 30001
    library: ClassVar[str] = "plugin"
    device: ClassVar[str] = "cpu"
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)
    priority: ClassVar[int] = 10

    def __init__(self, decline: str | None = None) -> None:
        self.decline = decline

    def serves(self, key: Any) -> bool:
        return key.op == "pointwise" and key.trait("mode") == "identity"

    def check(self, node: Any, graph: Any, device: Any) -> None:
        if self.decline:
            raise NotSupported(self.decline)

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        return NegatePlan()


def identity_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("id", io_dtype="float32")
    g.pointwise("identity", g.tensor("x", dims=(4,)), name="ident").set_output(True).set_name("y")
    return g


def run(ex: sigdnn.Executor) -> np.ndarray:
    return ex.run(identity_graph(), {"x": np.arange(4, dtype=np.float32)})["y"]


def test_in_tree_builders_load_lazily_once() -> None:
    reg = Registry()
    assert not reg._loaded
    names = [b.name for b in reg.builders()]
    assert names[:3] == ["reference.pointwise", "reference.matmul", "reference.conv_fprop"]
    assert reg.builders() == reg.builders()


def test_concurrent_first_lookups_build_the_registry_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real = registry_module._package_builders

    def counting(package: str) -> Any:
        calls.append(package)
        return real(package)

    monkeypatch.setattr(registry_module, "_package_builders", counting)
    reg = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
    threads = [threading.Thread(target=reg.builders) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert calls == ["sigdnn.plan_builders.reference"]


def test_runtime_register_ranks_by_priority_and_runs() -> None:
    reg = Registry()
    reg.register(PluginPointwise())
    assert run(sigdnn.Executor(registry=reg)).tolist() == [0, -1, -2, -3]
    assert run(sigdnn.Executor(registry=Registry())).tolist() == [0, 1, 2, 3]


def test_a_declining_builder_falls_through_to_the_next() -> None:
    reg = Registry()
    reg.register(PluginPointwise(decline="only on Tuesdays"))
    ex = sigdnn.Executor(registry=reg)
    assert run(ex).tolist() == [0, 1, 2, 3]
    plan = ex.prepare(identity_graph())
    assert plan.steps[0].declines == ("plugin.negate (#30001): only on Tuesdays",)


def test_pinning_is_strict_by_id_and_name() -> None:
    reg = Registry()
    reg.register(PluginPointwise(decline="no"))
    with pytest.raises(NoPlanError, match=r"node 'ident'.*pinned builder plugin.negate \(#30001\) declined: no"):
        sigdnn.Executor(registry=reg, engine=30001).prepare(identity_graph())
    with pytest.raises(NoPlanError, match="declined"):
        sigdnn.Executor(registry=reg, pins={"ident": "plugin.negate"}).prepare(identity_graph())
    ok = sigdnn.Executor(registry=reg, pins={"ident": 1000})
    assert ok.prepare(identity_graph()).steps[0].builder.engine_id == 1000
    with pytest.raises(NoPlanError, match="no builder has engine id or name 'nope'"):
        sigdnn.Executor(pins={"ident": "nope"}).prepare(identity_graph())


def test_pinning_a_builder_of_another_device_or_key_is_refused() -> None:
    with pytest.raises(NoPlanError, match="does not serve this key"):
        sigdnn.Executor(pins={"ident": "reference.matmul"}).prepare(identity_graph())


def test_engine_id_ranges_and_uniqueness() -> None:
    reg = Registry()

    class Bad(PluginPointwise):
        engine_id: ClassVar[int] = 1500

    with pytest.raises(RegistryError, match="out-of-tree engine ids start at 30000"):
        reg.register(Bad())

    class Stolen(PluginPointwise):
        name: ClassVar[str] = "reference.stolen"
        engine_id: ClassVar[int] = 1000
        library: ClassVar[str] = "reference"

    reg.builders()
    with pytest.raises(RegistryError, match=r"engine id 1000 is taken by 'reference\.pointwise'"):
        reg.register(Stolen())

    class WrongRange(PluginPointwise):
        library: ClassVar[str] = "cutile"
        engine_id: ClassVar[int] = 3005

    with pytest.raises(RegistryError, match="outside cutile's range 2000-2999"):
        reg.register(WrongRange())


def test_entry_points_load_and_broken_plugins_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    class LoadedEntryPoint:
        """What importlib.metadata gives for an installed plugin's entry point."""

        name, value = "good", "plugin_pkg:builders"

        def load(self) -> Any:
            return lambda: [PluginPointwise()]

    broken = EntryPoint("broken", "no_such_module_xyz:builders", "sigdnn.plan_builders")
    monkeypatch.setattr(registry_module, "entry_points", lambda group: [LoadedEntryPoint(), broken])
    reg = Registry()
    assert reg.find(30001).name == "plugin.negate"
    assert "ModuleNotFoundError" in reg.load_failures["entry point broken (no_such_module_xyz:builders)"]


def test_no_plan_lists_why_each_builder_declined() -> None:
    reg = Registry(packages=(), entry_point_group=None)
    reg.register(PluginPointwise(decline="too small"))
    with pytest.raises(NoPlanError, match=r"node 'ident' Pointwise\[identity\]\(f32->f32; f32\).*too small"):
        sigdnn.Executor(registry=reg).prepare(identity_graph())
    g = sigdnn.Graph("g", io_dtype="float32")
    g.pointwise("exp", g.tensor("x", dims=(2,)), name="e").set_output(True)
    with pytest.raises(NoPlanError, match="no reference builder serves this key"):
        sigdnn.Executor(registry=reg).prepare(g)


def test_unavailable_gpu_builders_are_listed_with_a_reason() -> None:
    builders = {b.name: b for b in Registry().builders()}
    tile = builders["cutile.pointwise"]
    assert tile.engine_id in range(2000, 3000)
    reason = tile.available()
    assert reason is None or isinstance(reason, str)


def test_a_duplicate_id_before_the_first_load_leaves_the_registry_whole() -> None:
    """Regression: register() before the registry loaded used to leave it half-loaded for good."""
    reg = Registry()

    class Stolen(PluginPointwise):
        name: ClassVar[str] = "reference.stolen"
        engine_id: ClassVar[int] = 1000
        library: ClassVar[str] = "reference"

    with pytest.raises(RegistryError, match="engine id 1000 is taken"):
        reg.register(Stolen())
    assert reg.load_failures == {}
    names = [b.name for b in reg.builders()]
    assert names.count("reference.pointwise") == 1 and "reference.stolen" not in names
    assert reg.builders() == reg.builders() and reg.load_failures == {}
    assert run(sigdnn.Executor(registry=reg)).tolist() == [0, 1, 2, 3]


def test_register_works_as_a_class_decorator_end_to_end() -> None:
    """Regression: the decorator form used to end in a bare TypeError at prepare."""
    reg = Registry()

    @reg.register
    class Decorated(PluginPointwise):
        name: ClassVar[str] = "plugin.decorated"
        engine_id: ClassVar[int] = 30002

    assert isinstance(Decorated, type)
    assert reg.find("plugin.decorated").engine_id == 30002
    assert run(sigdnn.Executor(registry=reg)).tolist() == [0, -1, -2, -3]


def test_registering_something_that_is_not_a_builder_is_a_registry_error() -> None:
    reg = Registry(packages=(), entry_point_group=None)
    with pytest.raises(RegistryError, match="is not a PlanBuilder"):
        reg.register(object())
    assert reg.builders() == []


def test_in_tree_engine_ids_never_change() -> None:
    """Engine ids are stable across releases: an id, once given, keeps its builder."""
    from sigdnn.registry.engine_ids import IN_TREE

    released = {"reference.pointwise": 1000, "reference.matmul": 1001, "reference.conv_fprop": 1002}
    released |= {"cutile.pointwise": 2001}
    for name, engine_id in released.items():
        assert IN_TREE[name] == engine_id, name
    assert len(set(IN_TREE.values())) == len(IN_TREE)
    in_tree = {b.name: b.engine_id for b in Registry(entry_point_group=None).builders()}
    assert in_tree == {k: v for k, v in IN_TREE.items() if k in in_tree}
    assert set(released) <= set(in_tree)


def test_an_in_tree_builder_whose_id_is_not_in_the_table_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from sigdnn.registry import engine_ids

    monkeypatch.setitem(engine_ids.IN_TREE, "reference.matmul", 1999)
    reg = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
    assert reg.builders() == []
    assert "engine_ids.IN_TREE" in reg.load_failures["sigdnn.plan_builders.reference"]


def test_lookups_are_indexed_by_op() -> None:
    reg = Registry()
    g = identity_graph()
    key = sigdnn.key_for(g.nodes[0], g)
    assert [b.name for b in reg.serving(key, "cpu")] == ["reference.pointwise"]
    assert reg._by_op.keys() >= {"pointwise", "matmul", "conv_fprop"}
