"""Registry bookkeeping, one rule at a time: what is found, what is refused, what replace/unregister leave."""

from __future__ import annotations

import types
from typing import Any, ClassVar

import pytest

import sigdnn
from sigdnn.errors import RegistryError
from sigdnn.registry import FusionBuilder, NodePlan, PlanBuilder, Registry
from sigdnn.registry.registry import _as_builders, builders_in
from sigdnn.signature_keys import key_for


class Plugin(PlanBuilder):
    name: ClassVar[str] = "plugin.a"
    engine_id: ClassVar[int] = 31000
    library: ClassVar[str] = "plugin"
    ops: ClassVar[tuple[str, ...]] = ("pointwise", "matmul")

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        raise AssertionError("not built in these tests")


class Other(Plugin):
    name, engine_id, ops, priority = "plugin.b", 31001, ("pointwise",), 5


class GpuOnly(Plugin):
    name, engine_id, device = "plugin.gpu", 31002, "gpu"


class Unavailable(Plugin):
    name, engine_id = "plugin.unavailable", 31003

    def available(self) -> str | None:
        return "no hardware"


class Picky(Plugin):
    name, engine_id = "plugin.picky", 31004

    def serves(self, key: Any) -> bool:
        return key.trait("mode") == "exp"


class Fuser(FusionBuilder):
    name, engine_id, library, priority = "plugin.fuse_low", 31010, "plugin", 1

    def claim(self, graph: Any, order: Any, device: Any) -> list:
        return []

    def build_region(self, region: Any, graph: Any, context: Any) -> Any:
        raise AssertionError


class FuserHigh(Fuser):
    name, engine_id, priority = "plugin.fuse_high", 31011, 7


class FuserTie(Fuser):
    name, engine_id, priority = "plugin.fuse_tie", 31009, 1


def empty() -> Registry:
    return Registry(packages=(), entry_point_group=None)


def exp_key() -> tuple:
    g = sigdnn.Graph("k", io_dtype="float32")
    g.pointwise("exp", g.tensor("x", (2,)), name="e").set_output(True)
    return key_for(g.nodes[0], g), g.nodes[0], g


def test_builders_in_takes_concrete_builders_defined_in_the_module_only() -> None:
    module = types.ModuleType("fake_builders")
    Local = type("Local", (Plugin,), {"__module__": "fake_builders", "name": "plugin.local", "engine_id": 31020})
    module.Local = Local
    module.Plugin = Plugin  # imported from elsewhere: not this module's
    module.PlanBuilder = PlanBuilder  # abstract
    module.number = 3
    found = builders_in(module)
    assert [type(b) for b in found] == [Local]


def test_entry_points_may_give_an_instance_a_class_or_a_callable() -> None:
    a = Plugin()
    assert _as_builders(a) == [a]
    assert [type(b) for b in _as_builders(Other)] == [Other]
    assert [type(b) for b in _as_builders(lambda: a)] == [Plugin]
    assert [type(b) for b in _as_builders(lambda: [Plugin, Other()])] == [Plugin, Other]
    with pytest.raises(RegistryError, match="is not a PlanBuilder"):
        _as_builders(42)


def test_a_source_with_two_builders_of_one_id_is_refused_whole() -> None:
    reg = empty()
    reg._add_source("twins", lambda: [Plugin(), type("Twin", (Plugin,), {"name": "plugin.twin"})()])
    assert "share an engine id" in reg.load_failures["twins"]
    assert reg.builders() == []
    reg._add_source("bad", lambda: [object()])
    assert "RegistryError" in reg.load_failures["bad"] and reg.builders() == []
    reg._add_source("good", lambda: [Plugin(), Other()])
    assert [b.name for b in reg.builders()] == ["plugin.a", "plugin.b"]
    assert "good" not in reg.load_failures


def test_register_refuses_taken_ids_and_names_unless_replacing() -> None:
    reg = empty()
    first = reg.register(Plugin())
    with pytest.raises(RegistryError, match=r"engine id 31000 is taken by 'plugin\.a'"):
        reg.register(type("Again", (Plugin,), {"name": "plugin.again"})())
    with pytest.raises(RegistryError, match=r"name 'plugin\.a' is taken by engine 31000"):
        reg.register(type("Same", (Plugin,), {"engine_id": 31050})())
    missing = type("NoLibrary", (PlanBuilder,), {"name": "plugin.x", "engine_id": 31060, "build": Plugin.build})
    with pytest.raises(RegistryError, match="does not declare 'library'"):
        reg.register(missing())
    assert reg.builders() == [first]
    newer = type("Newer", (Plugin,), {"ops": ("conv_fprop",)})()
    assert reg.register(newer, replace=True) is newer
    assert reg.builders() == [newer] and reg.find("plugin.a") is newer
    assert reg._by_op == {"pointwise": [], "matmul": [], "conv_fprop": [newer]}


def test_unregister_removes_every_index_entry() -> None:
    reg = empty()
    a, b, f = reg.register(Plugin()), reg.register(Other()), reg.register(Fuser())
    reg.unregister(a.engine_id)
    reg.unregister(f.engine_id)
    reg.unregister(99999)  # unknown ids are ignored
    assert reg.builders() == [b]
    with pytest.raises(RegistryError, match=r"no builder has engine id or name 'plugin\.a'"):
        reg.find("plugin.a")
    with pytest.raises(RegistryError):
        reg.find(a.engine_id)
    assert reg.find(b.engine_id) is b and reg.find("plugin.b") is b
    assert reg._by_op["pointwise"] == [b] and reg._by_op["matmul"] == []
    assert reg.fusion_builders("cpu") == []


def test_serving_and_candidates_filter_by_device_key_and_availability() -> None:
    reg = empty()
    for cls in (Plugin, Other, GpuOnly, Unavailable, Picky):
        reg.register(cls())
    key, node, graph = exp_key()
    assert [b.name for b in reg.serving(key, "cpu")] == ["plugin.a", "plugin.b", "plugin.unavailable", "plugin.picky"]
    assert [b.name for b in reg.serving(key, "gpu")] == ["plugin.gpu"]
    assert [b.name for b in reg.candidates(key, "cpu", node, graph)] == ["plugin.b", "plugin.a", "plugin.picky"]
    g = sigdnn.Graph("k", io_dtype="float32")
    g.pointwise("neg", g.tensor("x", (2,)), name="n").set_output(True)
    assert "plugin.picky" not in [b.name for b in reg.serving(key_for(g.nodes[0], g), "cpu")]


def test_fusion_builders_best_first_then_by_id() -> None:
    reg = empty()
    for cls in (Fuser, FuserHigh, FuserTie):
        reg.register(cls)
    reg.register(type("Off", (Fuser,), {"name": "plugin.off", "engine_id": 31012, "available": lambda s: "no"}))
    reg.register(type("Gpu", (Fuser,), {"name": "plugin.gpuf", "engine_id": 31013, "device": "gpu"}))
    assert [b.name for b in reg.fusion_builders("cpu")] == ["plugin.fuse_high", "plugin.fuse_tie", "plugin.fuse_low"]
    assert [b.name for b in reg.fusion_builders("gpu")] == ["plugin.gpuf"]


def test_register_as_a_decorator_returns_the_class() -> None:
    reg = empty()
    assert reg.register(Other) is Other
    assert isinstance(reg.find(Other.engine_id), Other)
