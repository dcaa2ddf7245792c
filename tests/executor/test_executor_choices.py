"""Executor decisions a wrong branch would change silently: which builder runs a node, which fusion
claims are committed, what the plan cache keeps, what execute() reports and refuses.

Each test states the outcome itself (which builder ran, seen through what it computes; which steps
exist; which plans are the same object), never by re-running the executor's own logic.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any, ClassVar

import attrs
import numpy as np
import pytest

import sigdnn
from sigdnn.errors import ExecutionError, NoPlanError, NotSupported, RegistryError, UsageError, VariantPackError
from sigdnn.executor import executor as executor_module
from sigdnn.executor.host import HostMemory
from sigdnn.registry import Dataflow, FusionBuilder, NodePlan, PlanBuilder, Region, RegionPlan, Registry, make_region


class NegatePlan(NodePlan):
    def execute(self, buffers: Any, context: Any = None) -> None:
        buffers["out_0"][...] = -buffers["in_0"]


class Negate(PlanBuilder):
    """Serves identity nodes with -x, so its output shows that it ran; may decline or be unavailable."""

    name: ClassVar[str] = "plugin.negate_choice"
    engine_id: ClassVar[int] = 30101
    library: ClassVar[str] = "plugin"
    device: ClassVar[str] = "cpu"
    ops: ClassVar[tuple[str, ...]] = ("pointwise",)
    priority: ClassVar[int] = 10

    def __init__(self, decline: str | None = None, unavailable: str | None = None) -> None:
        self.decline, self.unavailable = decline, unavailable

    def available(self) -> str | None:
        return self.unavailable

    def serves(self, key: Any) -> bool:
        return key.op == "pointwise" and key.trait("mode") == "identity"

    def check(self, node: Any, graph: Any, device: Any) -> None:
        if self.decline:
            raise NotSupported(self.decline)

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        return NegatePlan()


class LowNegate(Negate):
    name: ClassVar[str] = "plugin.low_negate_choice"
    engine_id: ClassVar[int] = 30102
    priority: ClassVar[int] = 5


class GpuNegate(Negate):
    name: ClassVar[str] = "plugin.gpu_negate_choice"
    engine_id: ClassVar[int] = 30103
    device: ClassVar[str] = "gpu"


def identity_graph(preferred: int | None = None) -> sigdnn.Graph:
    g = sigdnn.Graph("id", io_dtype="float32")
    g.pointwise("identity", g.tensor("x", dims=(4,)), name="ident").set_output(True).set_name("y")
    if preferred is not None:
        g.preferred_engine_id = preferred
    return g


X = np.arange(1, 5, dtype=np.float32)


def registry(*builders: PlanBuilder, in_tree: bool = True) -> Registry:
    reg = Registry(entry_point_group=None) if in_tree else Registry(packages=(), entry_point_group=None)
    for b in builders:
        reg.register(b)
    return reg


def ran(ex: sigdnn.Executor, g: sigdnn.Graph | None = None) -> list[float]:
    return ex.run(g or identity_graph(), {"x": X})["y"].tolist()


# -- choosing a node's builder -------------------------------------------------------------------


def test_the_graphs_preferred_engine_outranks_priority() -> None:
    reg = registry(Negate())
    assert ran(sigdnn.Executor(registry=reg)) == [-1, -2, -3, -4]  # priority 10 beats the reference
    assert ran(sigdnn.Executor(registry=reg), identity_graph(preferred=1000)) == [1, 2, 3, 4]
    assert ran(sigdnn.Executor(registry=reg), identity_graph(preferred=30101)) == [-1, -2, -3, -4]


def test_the_executors_engine_pins_the_nodes_it_serves() -> None:
    reg = registry(Negate())
    assert ran(sigdnn.Executor(registry=reg, engine=1000)) == [1, 2, 3, 4]
    assert ran(sigdnn.Executor(registry=reg, engine="reference.pointwise")) == [1, 2, 3, 4]


def test_a_decline_after_the_first_acceptance_is_not_reported() -> None:
    plan = sigdnn.Executor(registry=registry(Negate(), LowNegate(decline="never"))).prepare(identity_graph())
    assert plan.steps[0].builder.engine_id == 30101 and plan.steps[0].declines == ()
    plan = sigdnn.Executor(registry=registry(Negate(decline="too small"), LowNegate())).prepare(identity_graph())
    assert plan.steps[0].builder.engine_id == 30102
    assert plan.steps[0].declines == ("plugin.negate_choice (#30101): too small",)


def test_every_decline_is_listed_when_no_builder_accepts() -> None:
    reg = registry(Negate(decline="too small"), LowNegate(decline="too big"), in_tree=False)
    with pytest.raises(NoPlanError) as e:
        sigdnn.Executor(registry=reg).prepare(identity_graph())
    assert str(e.value).endswith(
        "no plan: plugin.negate_choice (#30101): too small; plugin.low_negate_choice (#30102): too big"
    )


def test_unavailable_builders_of_the_key_are_named_when_none_can_run() -> None:
    reg = registry(Negate(unavailable="no driver"), in_tree=False)
    with pytest.raises(NoPlanError) as e:
        sigdnn.Executor(registry=reg).prepare(identity_graph())
    assert str(e.value).endswith("no plan: plugin.negate_choice (#30101): unavailable: no driver")


@pytest.mark.parametrize(
    ("builder", "pin", "problem"),
    [
        (Negate(unavailable="no driver"), "plugin.negate_choice", "is unavailable: no driver"),
        (GpuNegate(), "plugin.gpu_negate_choice", "runs on gpu, this executor on cpu"),
        (Negate(), "reference.matmul", "does not serve this key"),
    ],
)
def test_a_pinned_builder_that_cannot_run_the_node_is_an_error(builder: PlanBuilder, pin: str, problem: str) -> None:
    ex = sigdnn.Executor(registry=registry(builder), pins={"ident": pin})
    with pytest.raises(NoPlanError) as e:
        ex.prepare(identity_graph())
    assert str(e.value).endswith(f"pinned builder {ex.registry.find(pin).name} (#{ex.registry.find(pin).engine_id}) "
                                 f"{problem}")  # fmt: skip


def test_an_unknown_engine_is_a_no_plan_error_naming_it() -> None:
    with pytest.raises(NoPlanError, match="nope"):
        sigdnn.Executor(engine="nope").prepare(identity_graph())


# -- fusion claims -------------------------------------------------------------------------------


class ScriptedFusion(FusionBuilder):
    """Claims the node sets it is given (by node name), in that order; runs a region node by node."""

    name: ClassVar[str] = "plugin.scripted_fusion"
    engine_id: ClassVar[int] = 30810
    library: ClassVar[str] = "plugin"

    def __init__(self, *claims: tuple[str, ...], tamper: bool = False) -> None:
        self.claims, self.tamper = claims, tamper

    def claim(self, graph: sigdnn.Graph, order: list[int], device: Any) -> list[Region]:
        flow = Dataflow(graph, order)
        index = {n.name: i for i, n in enumerate(graph.nodes)}
        regions = [make_region(flow, [index[name] for name in names]) for names in self.claims]
        return [attrs.evolve(r, exits=r.exits[:-1]) for r in regions] if self.tamper else regions

    def build_region(self, region: Region, graph: sigdnn.Graph, context: Any) -> RegionPlan:
        return NodeByNode(region, graph)


class NodeByNode(RegionPlan):
    def __init__(self, region: Region, graph: sigdnn.Graph) -> None:
        self.nodes = [graph.nodes[i] for i in region.nodes]

    def execute(self, buffers: Any, context: Any) -> None:
        values = dict(buffers)
        for node in self.nodes:
            (a,), (out,) = node.op.inputs().values(), node.op.outputs().values()
            values[out] = values.get(out, np.empty_like(values[a]))
            np.negative(values[a], out=values[out]) if node.op.mode == "neg" else np.exp(values[a], out=values[out])


def five_chain() -> sigdnn.Graph:
    """x -> a -> b -> c -> d -> e (exp / neg alternating), e the output."""
    g = sigdnn.Graph("five", io_dtype="float32", intermediate_dtype="float32")
    t = g.tensor("x", (4,))
    for i, name in enumerate("abcde"):
        t = g.pointwise("neg" if i % 2 else "exp", t, name=name)
    t.set_output(True).set_name("y")
    return g


def test_overlapping_claims_are_skipped_and_later_ones_still_committed() -> None:
    ex = sigdnn.Executor(registry=registry(ScriptedFusion(("a", "b"), ("b", "c"), ("d", "e"))))
    plan = ex.prepare(five_chain())
    assert [s.name for s in plan.steps] == ["region(a..b)", "c", "region(d..e)"]
    x = np.array([0.5, -1, 0.25, 2], np.float32)
    got = ex.execute(plan, {"x": x})["y"]
    want = np.exp(-np.exp(-np.exp(x.astype(np.float64))))  # e(d(c(b(a(x))))): exp, neg, exp, neg, exp
    np.testing.assert_allclose(got, want.astype(np.float32), rtol=1e-5)


def test_a_claim_unlike_make_regions_is_refused() -> None:
    ex = sigdnn.Executor(registry=registry(ScriptedFusion(("a", "b"), tamper=True)))
    with pytest.raises(RegistryError, match=r"plugin\.scripted_fusion claimed a region"):
        ex.prepare(five_chain())


def test_an_engine_keeps_other_fusion_builders_out() -> None:
    reg = registry(ScriptedFusion(("a", "b")))
    assert [s.name for s in sigdnn.Executor(registry=reg, engine=1000).prepare(five_chain()).steps] == list("abcde")
    fused = sigdnn.Executor(registry=reg, engine=30810).prepare(five_chain())
    assert [s.name for s in fused.steps] == ["region(a..b)", "c", "d", "e"]


def test_a_region_runs_where_its_first_node_is() -> None:
    """Without virtual tensors to weigh, steps keep the graph's order, a region ranked by its first node."""
    g = sigdnn.Graph("two", io_dtype="float32")
    p = g.pointwise("exp", g.tensor("p", (4,)), name="p_exp")
    g.pointwise("neg", g.tensor("q", (4,)), name="q_neg").set_output(True)
    g.pointwise("neg", p, name="p_neg").set_output(True)
    p.set_output(True)  # not virtual: no memory to weigh, the order is the rank's alone
    plan = sigdnn.Executor(registry=registry(ScriptedFusion(("p_exp", "p_neg")))).prepare(g)
    assert [s.name for s in plan.steps] == ["region(p_exp..p_neg)", "q_neg"]


# -- the plan cache ------------------------------------------------------------------------------


def sized(n: int) -> sigdnn.Graph:
    g = sigdnn.Graph("c", io_dtype="float32")
    g.pointwise("neg", g.tensor("x", (n,)), name="n").set_output(True)
    return g


def test_plans_are_cached_by_the_blake2b_digest_of_the_graph_buffer() -> None:
    g = sized(3)
    plan = sigdnn.Executor().prepare(g)
    assert plan.digest == hashlib.blake2b(g.serialize(), digest_size=16).hexdigest()


def test_the_cache_keeps_the_64_most_recently_used_plans() -> None:
    ex = sigdnn.Executor()
    first = [ex.prepare(sized(n)) for n in range(1, 65)]
    assert all(ex.prepare(sized(n)) is p for n, p in zip(range(1, 65), first))  # 64 fit; each now touched
    assert ex.prepare(sized(1)) is first[0]  # most recent now: sized(2) is the least recent
    newest = ex.prepare(sized(65))
    assert ex.prepare(sized(65)) is newest
    assert ex.prepare(sized(1)) is first[0]
    assert ex.prepare(sized(2)) is not first[1]  # evicted


def test_a_small_cache_evicts_the_least_recently_used() -> None:
    ex = sigdnn.Executor(cache_size=2)
    a, b = ex.prepare(sized(1)), ex.prepare(sized(2))
    assert ex.prepare(sized(1)) is a  # touch a: b is the least recent
    c = ex.prepare(sized(3))
    assert ex.prepare(sized(3)) is c and ex.prepare(sized(1)) is a
    assert ex.prepare(sized(2)) is not b


# -- construction and execute() ------------------------------------------------------------------


def test_gpu_only_settings_are_refused_on_the_reference() -> None:
    with pytest.raises(UsageError, match="cuda_graphs"):
        sigdnn.Executor("reference", cuda_graphs=True)
    with pytest.raises(UsageError, match="fallback"):
        sigdnn.Executor("reference", fallback="reference")
    with pytest.raises(UsageError, match="fallback"):
        sigdnn.Executor("gpu", fallback="elsewhere")
    assert sigdnn.Executor("gpu", fallback="reference").fallback == "reference"  # the GPU is needed only to run


def test_execute_takes_only_a_prepared_plan() -> None:
    with pytest.raises(UsageError, match="ExecutionPlan"):
        sigdnn.Executor().execute(identity_graph(), {"x": X})


def test_read_only_inputs_are_accepted_read_only_outputs_refused() -> None:
    ex = sigdnn.Executor()
    x = X.copy()
    x.setflags(write=False)
    assert ex.run(identity_graph(), {"x": x})["y"].tolist() == [1, 2, 3, 4]
    y = np.zeros(4, np.float32)
    y.setflags(write=False)
    with pytest.raises(VariantPackError, match="read-only"):
        ex.run(identity_graph(), {"x": X, "y": y})


def test_on_step_reports_each_step_in_order_with_its_own_time() -> None:
    g = five_chain()
    ex = sigdnn.Executor()
    plan = ex.prepare(g)
    seen: list[tuple[int, str, float]] = []
    started = time.perf_counter()
    ex.execute(plan, {"x": X}, on_step=lambda i, step, seconds: seen.append((i, step.name, seconds)))
    elapsed = time.perf_counter() - started
    assert [(i, name) for i, name, _ in seen] == list(enumerate("abcde"))
    assert all(0 <= s <= elapsed for _, _, s in seen)  # a step's time, not a clock reading


class RaisingPlan(NodePlan):
    def execute(self, buffers: Any, context: Any = None) -> None:
        raise VariantPackError("the plan's own words")


class Raising(Negate):
    name: ClassVar[str] = "plugin.raising_choice"
    engine_id: ClassVar[int] = 30104

    def build(self, node: Any, graph: Any, ctx: Any) -> NodePlan:
        return RaisingPlan()


def test_a_sigdnn_error_from_a_step_propagates_unwrapped() -> None:
    with pytest.raises(VariantPackError) as e:
        sigdnn.Executor(registry=registry(Raising())).run(identity_graph(), {"x": X})
    assert str(e.value) == "the plan's own words" and not isinstance(e.value, ExecutionError)


def test_gpu_settings_are_accepted_for_the_gpu_backend() -> None:
    ex = sigdnn.Executor("gpu", cuda_graphs=True, fallback="reference")  # the GPU is needed only to run
    assert ex.cuda_graphs and ex.fallback == "reference"


def test_a_released_buffer_is_a_usage_error() -> None:
    view = memoryview(identity_graph().serialize())
    view.release()
    with pytest.raises(UsageError, match="could not read the buffer"):
        sigdnn.Executor().prepare(view)


class LoggedMemory:
    """Host buffers that log the calls which order a run (the GPU memory's contract, seen on the CPU).

    It does not say ``keeps_scratch``: a memory that does not is given a fresh arena each run.
    """

    def __init__(self, log: list[str]) -> None:
        self.host, self.log = HostMemory(), log
        self.device = self.host.device
        self.stream = None

    def session(self) -> LoggedMemory:
        return self

    def arena(self, nbytes: int) -> Any:
        self.log.append("arena")
        return self.host.arena(nbytes)

    def synchronize(self) -> None:
        self.log.append("synchronize")

    def deliver(self, array: Any, to_host: bool) -> Any:
        self.log.append("deliver")
        return array

    def __getattr__(self, name: str) -> Any:  # accept, view, workspace, new_output, scalar, snapshot
        if name == "keeps_scratch":
            raise AttributeError(name)
        return getattr(self.host, name)


class KeepingMemory(LoggedMemory):
    keeps_scratch = True


def logged(memory: type[LoggedMemory], monkeypatch: pytest.MonkeyPatch) -> tuple[sigdnn.Executor, list[str]]:
    log: list[str] = []
    monkeypatch.setattr(executor_module, "HostMemory", lambda: memory(log))
    return sigdnn.Executor(), log


def test_the_device_is_synchronized_before_each_step_time_and_before_returning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ex, log = logged(LoggedMemory, monkeypatch)
    plan = ex.prepare(five_chain())
    log.clear()
    ex.execute(plan, {"x": X}, on_step=lambda i, step, seconds: log.append(f"on_step {i}"))
    steps = [entry for entry in log if entry.startswith("on_step") or entry == "synchronize"]
    assert steps == [x for i in range(5) for x in ("synchronize", f"on_step {i}")] + ["synchronize"]
    assert log[-2:] == ["deliver", "synchronize"]  # outputs handed out, then the device drained


def test_scratch_is_kept_between_runs_only_by_a_memory_that_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    for memory, arenas, kept in [(LoggedMemory, 3, 0), (KeepingMemory, 1, 1)]:
        ex, log = logged(memory, monkeypatch)
        g = five_chain()
        plan = ex.prepare(g)
        for _ in range(3):
            ex.execute(plan, {"x": X})
        assert log.count("arena") == arenas and len(plan.spare_scratch) == kept, memory.__name__
