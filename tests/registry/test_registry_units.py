"""Registry bookkeeping, one rule at a time: what is found, what is refused, what replace/unregister leave."""

from __future__ import annotations

import sys
import types
from typing import Any, ClassVar

import pytest

import sigdnn
import sigdnn.registry.registry as registry_module
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


class FakeEntryPoint:
    name, value = "fake", "fake_pkg:builders"

    def __init__(self, obj: Any) -> None:
        self.obj = obj

    def load(self) -> Any:
        return self.obj


def test_installed_plugins_are_read_from_the_documented_group(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = []
    monkeypatch.setattr(registry_module, "entry_points", lambda group: asked.append(group) or [FakeEntryPoint(Fuser)])
    reg = Registry(packages=())
    assert [b.name for b in reg.fusion_builders("cpu")] == ["plugin.fuse_low"]  # the first lookup loads
    assert asked == ["sigdnn.plan_builders"]


def test_unregister_before_the_first_lookup_still_removes(monkeypatch: pytest.MonkeyPatch) -> None:
    reg = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
    reg.unregister(1000)
    with pytest.raises(RegistryError):
        reg.find(1000)
    assert reg.find(1001).name == "reference.matmul"


def test_a_source_cannot_take_an_id_already_loaded() -> None:
    reg = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group=None)
    reg.builders()
    thief = type("Thief", (Plugin,), {"name": "plugin.thief", "engine_id": 1000, "library": "reference"})
    reg._add_source("thief", lambda: [thief()])
    assert "engine id 1000 is taken" in reg.load_failures["thief"]
    assert reg.find(1000).name == "reference.pointwise"


def test_private_modules_of_a_builder_package_are_skipped(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    pkg = tmp_path / "fake_builder_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    body = "from tests_helper_plugin import Plugin\nclass {cls}(Plugin):\n    name, engine_id = 'plugin.{name}', {id}\n"
    (pkg / "public.py").write_text(body.format(cls="Public", name="public", id=31100))
    (pkg / "_private.py").write_text(body.format(cls="Private", name="private", id=31101))
    helper = types.ModuleType("tests_helper_plugin")
    helper.Plugin = Plugin
    monkeypatch.setitem(sys.modules, "tests_helper_plugin", helper)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(registry_module, "IN_TREE", {**registry_module.IN_TREE, "plugin.public": 31100,
                                                     "plugin.private": 31101})  # fmt: skip
    reg = Registry(packages=("fake_builder_pkg",), entry_point_group=None)
    assert [b.name for b in reg.builders()] == ["plugin.public"]
    assert reg.load_failures == {}


def test_the_module_level_register_refuses_a_taken_id_by_default() -> None:
    from sigdnn.registry import DEFAULT_REGISTRY, register

    taker = type("Taker", (Plugin,), {"name": "plugin.taker", "engine_id": 1000, "library": "reference"})
    with pytest.raises(RegistryError, match="is taken"):
        register(taker)
    assert DEFAULT_REGISTRY.find(1000).name == "reference.pointwise"
    fresh = type("Fresh", (Plugin,), {"name": "plugin.fresh", "engine_id": 31200})
    try:
        assert register(fresh) is fresh
        assert isinstance(DEFAULT_REGISTRY.find(31200), fresh)
    finally:
        DEFAULT_REGISTRY.unregister(31200)


def _pointwise_key() -> Any:
    g = sigdnn.Graph("k", io_dtype="float32")
    g.pointwise("relu_fwd", g.tensor("x", (2,))).set_output(True)
    return key_for(g.nodes[0], g)


@pytest.mark.parametrize("lookup", ["serving", "fusion_builders"])
def test_a_device_s_lookups_load_only_that_device_s_in_tree_packages(lookup: str) -> None:
    """A reference run imports no GPU builder module (#32: start-up time); the GPU's packages load when asked for,
    and any lookup of every builder loads them all."""
    reg = Registry(packages=("sigdnn.plan_builders.reference", "no_such_gpu_builders"), entry_point_group=None)
    call = (lambda device: reg.serving(_pointwise_key(), device)) if lookup == "serving" else reg.fusion_builders
    call("cpu")
    assert reg.load_failures == {} and not reg._loaded
    assert [b.name for b in reg.serving(_pointwise_key(), "cpu")] == ["reference.pointwise"]
    call("gpu")
    assert list(reg.load_failures) == ["no_such_gpu_builders"] and reg._loaded
    call("gpu")  # loaded once
    assert list(reg.load_failures) == ["no_such_gpu_builders"]


def test_finding_a_builder_by_name_loads_every_package() -> None:
    reg = Registry(packages=("sigdnn.plan_builders.reference", "no_such_gpu_builders"), entry_point_group=None)
    reg.serving(_pointwise_key(), "cpu")
    assert reg.find("reference.pointwise").name == "reference.pointwise"
    assert list(reg.load_failures) == ["no_such_gpu_builders"] and reg._loaded


def test_entry_points_load_once_with_the_first_device_lookup(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    monkeypatch.setattr(registry_module, "entry_points", lambda group: calls.append(group) or [])
    reg = Registry(packages=("sigdnn.plan_builders.reference",), entry_point_group="some.group")
    reg.serving(_pointwise_key(), "cpu")
    reg.serving(_pointwise_key(), "gpu")
    reg.builders()
    assert calls == ["some.group"]
