"""Executor("gpu", fallback="reference"): nodes no GPU builder takes run on the reference, and say so."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pytest
from emulated import emulated_executor, host_gpu_executor, make_available

import sigdnn
from sigdnn.errors import NoPlanError, NotSupported, UsageError
from sigdnn.executor.fallback import FallbackBuilder, fallback_builder
from sigdnn.plan_builders.cutile import matmul as cutile_matmul
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.signature_keys import key_for


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    # matmul stands for a node the GPU builders do not take: the cuTile matmul is kept out (here and on a GPU)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: "left out of this test")


def mlp() -> sigdnn.Graph:
    g = sigdnn.Graph("mlp", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(8, 16))
    w = g.tensor("w", dims=(16, 16))
    y = g.pointwise("gelu_fwd", g.matmul(x, w, name="mm"), name="act")
    y.set_output(True).set_name("y")
    return g


def test_strict_by_default():
    with pytest.raises(NoPlanError, match=r"node 'mm'.*cutile\.matmul \(#2030\): unavailable"):
        emulated_executor().prepare(mlp())


def test_fallback_names_the_node_and_why():
    ex = emulated_executor(fallback="reference")
    plan = ex.prepare(mlp())
    by_name = {s.name: s for s in plan.steps}
    assert by_name["mm"].builder.name == "reference.matmul (fallback)"
    assert "cutile.matmul (#2030): unavailable" in by_name["mm"].declines[0]
    assert by_name["act"].builder.name == "cutile.pointwise"
    assert "reference.matmul (fallback)" in plan.describe()
    assert plan.as_dict()["steps"][0]["declines"]
    report = sigdnn.validate(mlp(), executor=ex)
    assert report.passed, report.table()
    assert report.builders == {"mm": "reference.matmul (fallback)", "act": "cutile.pointwise"}


def test_pinned_nodes_never_fall_back():
    ex = emulated_executor(fallback="reference", pins={"mm": "cutile.pointwise"})
    with pytest.raises(NoPlanError, match=r"pinned builder cutile\.pointwise"):
        ex.prepare(mlp())


def test_fallback_is_a_gpu_option():
    with pytest.raises(UsageError, match="fallback"):
        sigdnn.Executor("reference", fallback="reference")
    with pytest.raises(UsageError, match="fallback"):
        sigdnn.Executor("gpu", fallback="cpu")


def small_ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Integers in [-3, 3]: every product and sum of the matmul below is exact in float32."""
    return rng.integers(-3, 4, size=shape).astype(np.float32)


def test_fallback_on_device_buffers_writes_only_the_outputs_elements():
    """The GPU path: inputs copied to the host, the output written back into a strided caller buffer."""
    g = sigdnn.Graph("mm", io_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(4, 6))
    w = g.tensor("w", dims=(6, 5))
    g.matmul(x, w, name="mm").set_output(True).set_name("y").set_stride((8, 1))  # rows 8 apart: 3 gaps each
    ex = host_gpu_executor(fallback="reference")
    plan = ex.prepare(g)
    assert plan.steps[0].builder.name == "reference.matmul (fallback)"
    ctx = ex.memory.context
    rng = np.random.default_rng(5)
    xs, ws = small_ints(rng, (4, 6)), small_ints(rng, (6, 5))
    sentinel = np.full((4, 8), 77.0, np.float32)
    y_dev = ctx.to_device(sentinel).as_strided((4, 5), (8, 1))
    ex.execute(plan, {"x": ctx.to_device(xs), "w": ctx.to_device(ws), "y": y_dev})
    got = ctx.to_host(ctx.to_device(np.zeros(1, np.float32)))  # a sync point, as a caller would have
    whole = ctx.to_host(y_dev.as_strided((4, 8), (8, 1)))
    assert np.array_equal(whole[:, :5], (xs.astype(np.float64) @ ws.astype(np.float64)).astype(np.float32))
    assert np.all(whole[:, 5:] == 77.0), "the gaps of the caller's buffer were overwritten"
    assert got.shape == (1,)


def test_fallback_between_gpu_steps_reads_and_writes_device_intermediates():
    """matmul (fallback) feeding a cuTile step: its input comes from device memory, its output goes to the arena."""
    ex = host_gpu_executor(fallback="reference")
    g = mlp()
    plan = ex.prepare(g)
    assert [s.builder.name for s in plan.steps] == ["reference.matmul (fallback)", "cutile.pointwise"]
    rng = np.random.default_rng(6)
    data = {"x": small_ints(rng, (8, 16)), "w": small_ints(rng, (16, 16))}
    got = ex.run(g, data)["y"]
    torch = pytest.importorskip("torch")
    mm = torch.from_numpy(data["x"]).double() @ torch.from_numpy(data["w"]).double()
    want = torch.nn.functional.gelu(mm).float().numpy()
    assert np.allclose(got, want, rtol=1e-5, atol=1e-6), np.abs(got - want).max()  # cuTile gelu: float32 math


def test_the_fallback_builder_presents_the_reference_builder_as_a_gpu_one():
    step = emulated_executor(fallback="reference").prepare(mlp()).steps[0]
    builder, inner = step.builder, step.builder.inner
    assert (builder.device, inner.device) == ("gpu", "cpu")
    assert (builder.engine_id, builder.library, builder.ops) == (inner.engine_id, "reference", ("matmul",))
    assert builder.serves(step.key)
    assert repr(builder) == f"<FallbackBuilder reference.matmul (fallback) #{inner.engine_id} (reference)>"
    assert step.plan.workspace_bytes == 0


class _Declines(PlanBuilder):
    name: ClassVar[str] = "plugin.declines"
    engine_id: ClassVar[int] = 31100
    library: ClassVar[str] = "plugin"
    ops: ClassVar[tuple[str, ...]] = ("matmul",)
    priority: ClassVar[int] = 9  # ranked first

    def check(self, node: Any, graph: Any, device: Any) -> None:
        raise NotSupported("too picky")

    def build(self, node: Any, graph: Any, context: Any) -> NodePlan:
        raise AssertionError("a declining builder is never built")


class _Takes(_Declines):
    name, engine_id, priority = "plugin.takes", 31101, 1

    def check(self, node: Any, graph: Any, device: Any) -> None:
        pass


def _matmul_node() -> tuple[sigdnn.Graph, Any, Any]:
    g = mlp()
    node = next(n for n in g.nodes if n.name == "mm")
    return g, node, key_for(node, g)


def test_fallback_builder_skips_a_declining_builder_for_the_next():
    g, node, key = _matmul_node()
    registry = Registry(packages=(), entry_point_group=None)
    registry.register(_Declines())
    registry.register(_Takes())
    chosen = fallback_builder(registry, node, g, key, NoPlanError("gpu said no"))
    assert isinstance(chosen, FallbackBuilder) and chosen.inner.name == "plugin.takes"


def test_fallback_builder_says_why_each_reference_builder_declined():
    g, node, key = _matmul_node()
    registry = Registry(packages=(), entry_point_group=None)
    registry.register(_Declines())
    with pytest.raises(NoPlanError, match=r"^gpu said no; no fallback either: plugin\.declines: too picky$"):
        fallback_builder(registry, node, g, key, NoPlanError("gpu said no"))
    with pytest.raises(NoPlanError, match=r"^gpu said no; no fallback either: no reference builder serves this key$"):
        fallback_builder(Registry(packages=(), entry_point_group=None), node, g, key, NoPlanError("gpu said no"))


def test_validate_reads_device_results_back_to_the_host():
    """validate() on device buffers: every step and output compared from host copies, and the fallback named."""
    report = sigdnn.validate(mlp(), seed=3, executor=host_gpu_executor(fallback="reference"))
    assert report.passed, report.table()
    assert report.builders == {"mm": "reference.matmul (fallback)", "act": "cutile.pointwise"}
    assert [c.size for c in report.outputs] == [128]
