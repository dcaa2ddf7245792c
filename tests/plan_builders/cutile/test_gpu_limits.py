"""A GPU executor's limits: the reference's float64 scratch is not charged to it and its work bound is the GPU's
(``GPU_LIMITS``); only a step that falls back to the reference is held to the reference's cost."""

from __future__ import annotations

import re

import attrs
import pytest
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.graph.limits import DEFAULT_LIMITS, GPU_LIMITS
from sigdnn.plan_builders.cutile import matmul as cutile_matmul


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: None)


def matmul_graph() -> sigdnn.Graph:
    """bf16 64 x 64 x 64: 24 KiB of tensors, whose float64 widening (the reference's scratch) is 96 KiB more."""
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    g.matmul(g.tensor("a", (64, 64)), g.tensor("b", (64, 64)), name="mm").set_output(True)
    return g


def test_each_backend_gets_its_default_limits() -> None:
    assert sigdnn.Executor("reference").limits is DEFAULT_LIMITS
    assert sigdnn.Executor("gpu").limits is GPU_LIMITS
    assert sigdnn.Executor("gpu", fallback="reference").limits is GPU_LIMITS
    assert sigdnn.Executor("gpu-reference").limits is GPU_LIMITS  # float64 GEMMs at tens of TFLOP/s
    mine = attrs.evolve(DEFAULT_LIMITS, max_work=5)
    assert sigdnn.Executor("gpu", limits=mine).limits is mine
    assert (
        GPU_LIMITS.max_work > DEFAULT_LIMITS.max_work and GPU_LIMITS.max_total_bytes == DEFAULT_LIMITS.max_total_bytes
    )


def test_a_llama_layers_backward_is_past_the_cpu_references_work_bound_and_within_the_gpu_references() -> None:
    """Validating a Llama layer at seq 4096 with the GPU truth refused it at prepare (2^40.07 element operations)."""
    from sigdnn.graph.checks import check_graph
    from sigdnn.models import llama_layer

    g = llama_layer(seq=4096, backward=True)
    with pytest.raises(GraphError, match="the graph's work reaches"):
        sigdnn.Executor("reference").prepare(g)
    check_graph(g, sigdnn.Executor("gpu-reference").limits)


def test_the_reference_scratch_binds_only_where_a_reference_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    limits = attrs.evolve(DEFAULT_LIMITS, max_total_bytes=64 * 1024)  # the tensors fit, their widening does not
    with pytest.raises(GraphError, match=r"node 'mm': needs \d+ bytes of scratch"):
        sigdnn.Executor("reference", limits=limits).prepare(matmul_graph())
    for fallback in (None, "reference"):  # the matmul runs on the GPU: nothing of the reference's is charged
        plan = emulated_executor(limits=limits, fallback=fallback).prepare(matmul_graph())
        assert [s.builder.library for s in plan.steps] == ["cutile"]
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: "not here")  # now it falls back
    with pytest.raises(GraphError, match=r"node 'mm' \(falling back to the reference\): needs \d+ bytes of scratch"):
        emulated_executor(limits=limits, fallback="reference").prepare(matmul_graph())
    with pytest.raises(GraphError, match="tensor"):  # the tensors themselves still count
        emulated_executor(limits=attrs.evolve(limits, max_total_bytes=16 * 1024)).prepare(matmul_graph())


def test_the_reference_work_binds_only_the_steps_that_fall_back(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 2^14-cubed bf16 matmul (2^42 multiply-adds): within GPU_LIMITS, past the reference's DEFAULT_LIMITS."""
    g = sigdnn.Graph("big", io_dtype="bfloat16", compute_dtype="float32")
    g.matmul(g.tensor("a", (2**14, 2**14)), g.tensor("b", (2**14, 2**14)), name="mm").set_output(True)
    with pytest.raises(GraphError, match="the graph's work reaches"):
        sigdnn.Executor("reference").prepare(g)
    assert emulated_executor(fallback="reference").prepare(g).steps[0].builder.library == "cutile"
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: "not here")
    with pytest.raises(GraphError, match=r"node 'mm' \(falling back to the reference\): the reference's work"):
        emulated_executor(fallback="reference").prepare(g)


def test_a_fallback_step_at_exactly_its_reference_cost_is_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bounds are inclusive: the bytes and work a refusal names are the limits that let the step through."""
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: "not here")
    tight = attrs.evolve(DEFAULT_LIMITS, max_total_bytes=32 * 1024, max_work=1)  # the tensors take 24 KiB
    with pytest.raises(GraphError, match=r"makes (\d+) bytes") as refused:
        emulated_executor(limits=attrs.evolve(tight, max_work=2**40), fallback="reference").prepare(matmul_graph())
    needed = int(re.search(r"makes (\d+) bytes", str(refused.value)).group(1))
    with pytest.raises(GraphError, match=r"reaches (\d+) element operations") as refused:
        emulated_executor(limits=attrs.evolve(tight, max_total_bytes=needed), fallback="reference").prepare(
            matmul_graph()
        )
    work = int(re.search(r"reaches (\d+) element", str(refused.value)).group(1))
    exact = attrs.evolve(tight, max_total_bytes=needed, max_work=work)
    assert emulated_executor(limits=exact, fallback="reference").prepare(matmul_graph())
