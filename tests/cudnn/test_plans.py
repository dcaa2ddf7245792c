"""One ranked plan list: count, names, build and execute by index, decline advance, pinning, the router."""

from __future__ import annotations

import pytest
import torch

import sigdnn
import sigdnn.cudnn as cudnn
from sigdnn.executor.autotune import Tuner
from sigdnn.executor.plan_list import first_that_builds, plan_list, realize
from sigdnn.executor.router import Router, default_router, set_default_router
from tests.cudnn import plan_builders

F64 = cudnn.data_type.DOUBLE
NAMES = ["plan.first[a]", "plan.first[b]", "plan.second", "reference.matmul"]


def matmul_graph(executor=None, router=None):
    handle = cudnn.create_handle(device="cpu", executor=executor or plan_builders.executor())
    g = cudnn.pygraph(io_data_type=F64, compute_data_type=F64, handle=handle, router=router)
    a, b = torch.randn(3, 4, dtype=torch.float64), torch.randn(4, 5, dtype=torch.float64)
    A, B = g.tensor_like(a), g.tensor_like(b)
    C = g.matmul(A, B).set_output(True)
    g.build_operation_graph()
    g.create_execution_plans([cudnn.heur_mode.A])
    return g, {A: a, B: b}, C, a @ b


def run_built(g, pack, C, index=None):
    c = torch.empty(C.get_dim(), dtype=torch.float64)
    if index is None:
        g.execute({**pack, C: c}, None)
    else:
        g.execute_plan_at_index({**pack, C: c}, None, index)
    return c


def test_the_list_ranks_every_builder_and_configuration_that_accepts_the_node():
    g, _, _, _ = matmul_graph()
    assert g.get_execution_plan_count() == 4
    assert [g.get_plan_name_at_index(i) for i in range(4)] == NAMES  # plan.checker declined at check
    with pytest.raises(sigdnn.UsageError):
        g.get_plan_name_at_index(4)


def test_build_plans_advances_past_a_decline_to_the_first_that_builds():
    g, pack, C, expect = matmul_graph()
    g.build_plans()
    torch.testing.assert_close(run_built(g, pack, C), expect + 1.0)  # plan.first[b]
    assert g.get_workspace_size() == 64


def test_a_pinned_decline_raises_instead_of_running_another():
    g, _, _, _ = matmul_graph()
    g.select_plan(0)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="configuration a"):
        g.build_plans()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError):
        g.build_plan_at_index(0)


def test_a_pinned_plan_runs_that_plan():
    g, pack, C, expect = matmul_graph()
    g.select_plan(2)
    g.build_plans()
    torch.testing.assert_close(run_built(g, pack, C), expect + 2.0)


def test_plans_by_index_build_execute_and_size_independently():
    g, pack, C, expect = matmul_graph()
    g.build_plan_at_index(3)
    torch.testing.assert_close(run_built(g, pack, C, 3), expect)  # the reference, exact
    torch.testing.assert_close(run_built(g, pack, C, 2), expect + 2.0)
    assert g.get_workspace_size_plan_at_index(2) == 128
    assert g.get_workspace_size_plan_at_index(3) == 0


def test_build_all_keeps_every_plan_that_builds():
    g, pack, C, expect = matmul_graph()
    g.build_plans(cudnn.build_plan_policy.ALL)
    torch.testing.assert_close(run_built(g, pack, C), expect + 1.0)  # the first that built runs
    torch.testing.assert_close(run_built(g, pack, C, 3), expect)


def test_deselect_engines_drops_them_from_the_list():
    g, _, _, _ = matmul_graph()
    g.deselect_engines(["plan.first[a]", "plan.second"])
    assert [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())] == NAMES[1::2]


class Reversed(Router):
    def rank(self, builders, node, graph):
        return list(reversed(super().rank(builders, node, graph)))


def test_a_graph_router_reorders_the_list():
    g, pack, C, expect = matmul_graph(router=Reversed())
    assert g.get_plan_name_at_index(0) == "reference.matmul"
    g.build_plans()
    torch.testing.assert_close(run_built(g, pack, C), expect)


def test_an_executor_router_and_the_process_default():
    g, _, _, _ = matmul_graph(executor=plan_builders.executor(router=Reversed()))
    assert g.get_plan_name_at_index(0) == "reference.matmul"
    previous = set_default_router(Reversed())
    try:
        assert isinstance(default_router(), Reversed)
        g, _, _, _ = matmul_graph()
        assert g.get_plan_name_at_index(0) == "reference.matmul"
        g, _, _, _ = matmul_graph(executor=plan_builders.executor(router=Router()))  # the executor's wins
        assert g.get_plan_name_at_index(0) == "plan.first[a]"
    finally:
        set_default_router(previous)
    assert default_router() is previous


def test_a_router_choose_policy_puts_its_pick_first():
    class Pick(Router):
        def choose(self, candidates, graph, shape, device, memory, build):
            ordered = sorted(candidates, key=lambda c: c.label != "plan.second")
            return ordered, None

    g, pack, C, expect = matmul_graph(router=Pick())
    assert g.get_plan_name_at_index(0) == "plan.second"
    g.build_plans()
    torch.testing.assert_close(run_built(g, pack, C), expect + 2.0)


def test_autotune_is_a_router_and_excludes_router():
    assert isinstance(Tuner(measure=False), Router)
    with pytest.raises(sigdnn.UsageError, match="not both"):
        sigdnn.Executor(autotune=True, router=Router())


def sigdnn_matmul_graph():
    g = sigdnn.Graph("mm", io_dtype="float64", compute_dtype="float64")
    a, b = g.tensor("a", (2, 3)), g.tensor("b", (3, 2))
    g.matmul(a, b).set_output(True).set_name("c")
    return g


def test_sigdnn_plan_candidates_and_list():
    ex = plan_builders.executor()
    plan = ex.prepare(sigdnn_matmul_graph())
    (step,) = plan.steps
    assert [c.label for c in plan.candidates[0]] == NAMES
    assert step.chosen == 1 and step.builder.name == "plan.first"
    assert any("configuration a" in d for d in step.declines)
    entries = plan_list(plan)
    assert [e.name for e in entries] == NAMES
    with pytest.raises(sigdnn.NotSupported):
        realize(plan, entries[0], ex.device)
    index, built, declines = first_that_builds(plan, entries, 0, ex.device)
    assert index == 1 and len(declines) == 1 and built.steps[0] is step
    second = realize(plan, entries[2], ex.device)
    assert second.steps[0].builder.name == "plan.second" and second.workspace_bytes == 128
    with pytest.raises(sigdnn.UsageError):
        first_that_builds(plan, entries, 4, ex.device)


def test_sigdnn_pin_to_a_builder_whose_every_configuration_declines_raises():
    class OnlyA(plan_builders.First):
        def configs(self, nodes, graph, device):
            return ["a"]

    registry = plan_builders.registry()
    registry.register(OnlyA, replace=True)
    with pytest.raises(sigdnn.NoPlanError, match="pinned"):
        sigdnn.Executor(registry=registry, engine="plan.first").prepare(sigdnn_matmul_graph())
    plan = sigdnn.Executor(registry=registry).prepare(sigdnn_matmul_graph())
    assert plan.steps[0].builder.name == "plan.second"  # unpinned: the decline advances


def test_multi_step_list_switches_one_step_at_a_time():
    g = sigdnn.Graph("two", io_dtype="float64", compute_dtype="float64")
    a, b = g.tensor("a", (2, 3)), g.tensor("b", (3, 2))
    g.relu(g.matmul(a, b)).set_output(True).set_name("y")
    plan = plan_builders.executor().prepare(g)
    names = [e.name for e in plan_list(plan)]
    assert names[0] == "plan.first[a] + reference.pointwise"
    assert names[1:] == [f"{n} + reference.pointwise" for n in NAMES[1:]]


def test_realize_records_which_candidate_each_step_runs_and_refuses_foreign_entries():
    ex = plan_builders.executor()
    plan = ex.prepare(sigdnn_matmul_graph())
    entries = plan_list(plan)
    assert realize(plan, entries[3], ex.device).steps[0].chosen == 3
    assert realize(plan, entries[2], ex.device).steps[0].chosen == 2
    assert realize(plan, entries[1], ex.device).steps[0] is plan.steps[0]
    with pytest.raises(sigdnn.UsageError, match="steps"):
        realize(plan, entries[0].__class__(entries[0].assignment * 2), ex.device)
    stranger = entries[0].__class__((plan_builders.Candidate(plan_builders.Checker()),))
    with pytest.raises(sigdnn.UsageError, match="no candidate"):
        realize(plan, stranger, ex.device)


def test_first_that_builds_names_every_decline_when_none_builds():
    ex = plan_builders.executor()
    plan = ex.prepare(sigdnn_matmul_graph())
    entries = plan_list(plan)
    with pytest.raises(sigdnn.NotSupported, match=r"plan 0 .*configuration a"):
        first_that_builds(plan, entries[:1], 0, ex.device)
    index, _, declines = first_that_builds(plan, entries, 2, ex.device)
    assert (index, declines) == (2, [])


def test_a_step_without_candidates_lists_its_builder_alone():
    import attrs

    ex = plan_builders.executor()
    plan = ex.prepare(sigdnn_matmul_graph())
    bare = attrs.evolve(plan, steps=(attrs.evolve(plan.steps[0], candidates=(), chosen=0),))
    (entry,) = plan_list(bare)
    assert entry.name == "plan.first"
    assert realize(bare, entry, ex.device).steps[0] is bare.steps[0]


def test_an_empty_plan_has_an_empty_list():
    import attrs

    plan = plan_builders.executor().prepare(sigdnn_matmul_graph())
    assert plan_list(attrs.evolve(plan, steps=())) == ()


def test_multi_step_entries_keep_the_other_steps_at_their_best():
    g = sigdnn.Graph("two", io_dtype="float64", compute_dtype="float64")
    a, b = g.tensor("a", (2, 3)), g.tensor("b", (3, 2))
    c = g.matmul(a, b)
    g.matmul(c, g.tensor("d", (2, 2))).set_output(True).set_name("y")
    plan = plan_builders.executor().prepare(g)
    names = [e.name for e in plan_list(plan)]
    assert names == [
        "plan.first[a] + plan.first[a]",
        "plan.first[b] + plan.first[a]",
        "plan.first[a] + plan.first[b]",
        "plan.second + plan.first[a]",
        "plan.first[a] + plan.second",
        "reference.matmul + plan.first[a]",
        "plan.first[a] + reference.matmul",
    ]


def test_set_default_router_returns_the_one_it_replaces():
    first, second = Router(), Reversed()
    outer = set_default_router(first)
    try:
        assert set_default_router(second) is first
        assert default_router() is second
    finally:
        set_default_router(outer)


def test_build_all_builds_every_plan_up_front_and_heuristics_only_the_first_that_builds():
    g, _, _, _ = matmul_graph()
    plan_builders.BUILDS.clear()
    g.build_plans()
    assert plan_builders.BUILDS == ["plan.first[a]"]  # first[b] was built by prepare already
    g, _, _, _ = matmul_graph()
    plan_builders.BUILDS.clear()
    g.build_plans(cudnn.build_plan_policy.ALL)
    assert plan_builders.BUILDS == ["plan.first[a]", "plan.second"]


def test_plan_calls_name_themselves_when_misused():
    g, pack, C, _ = matmul_graph()
    with pytest.raises(sigdnn.UsageError, match="build_plans"):
        run_built(g, pack, C)  # execute before anything was built
    with pytest.raises(sigdnn.UsageError, match="get_workspace_size"):
        g.get_workspace_size()
    with pytest.raises(sigdnn.UsageError, match=r"^select_plan\(9\)"):
        g.select_plan(9)
    with pytest.raises(sigdnn.UsageError, match=r"^build_plan_at_index\(-1\)"):
        g.build_plan_at_index(-1)
    with pytest.raises(sigdnn.UsageError, match="build_plan_at_index"):
        g.build_plan_at_index(True)


def only_declining_registry():
    class OnlyA(plan_builders.First):
        def configs(self, nodes, graph, device):
            return ["a"]

    registry = sigdnn.Registry(packages=(), entry_point_group=None)
    registry.register(OnlyA)
    return registry


def test_when_no_plan_builds_both_policies_raise_naming_the_declines():
    executor = sigdnn.Executor(registry=only_declining_registry())
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="every candidate declined"):
        matmul_graph(executor=executor)  # prepare itself finds nothing that builds
    for policy in (cudnn.build_plan_policy.HEURISTICS_CHOICE, cudnn.build_plan_policy.ALL):
        g, _, _, _ = matmul_graph()
        g.deselect_engines(["plan.first[b]", "plan.second", "reference.matmul"])
        with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="configuration a"):
            g.build_plans(policy)


def test_an_empty_list_and_an_unserved_graph_are_not_supported():
    g, _, _, _ = matmul_graph()
    g.deselect_engines(NAMES)
    with pytest.raises(cudnn.cudnnGraphNotSupportedError):
        g.check_support()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="empty"):
        g.build_plans()
    with pytest.raises(cudnn.cudnnGraphNotSupportedError, match="create_execution_plans"):
        matmul_graph(executor=sigdnn.Executor(registry=sigdnn.Registry(packages=(), entry_point_group=None)))
