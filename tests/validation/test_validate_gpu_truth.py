"""validate(truth="gpu"): the GPU reference (here emulated on the CPU) judges as the CPU reference does.

The device is a planted-bug "fast builder" registered over the CPU
reference: an off-by-one index (a convolution reading x one position to the
right), a wrong epsilon (layernorm with 10x the node's), a half-precision
accumulation (a matmul summing in float16). Each must fail with either
truth, with the same tolerances; an honest device must pass with both; the
report names its truth.
"""

from __future__ import annotations

import numpy as np
import pytest
from gpu_reference_emulation import gpu_reference_executor, make_available
from test_sdpa_rounded_weights import FlashSdpa

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.errors import UsageError
from sigdnn.graph.ops import OP_CLASSES
from sigdnn.plan_builders.reference.conv_fprop import ReferenceConvFprop
from sigdnn.plan_builders.reference.normalization import ReferenceLayernorm
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.validation import truth as truth_module


@pytest.fixture(autouse=True)
def _available(monkeypatch: pytest.MonkeyPatch) -> None:
    make_available(monkeypatch)


def conv_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype="float16", compute_dtype="float32")
    x, w = g.tensor("x", (2, 3, 6, 5)), g.tensor("w", (4, 3, 3, 3))
    y = g.conv_fprop(x, w, padding=(1, 1), stride=(1, 1), dilation=(1, 1), name="conv")
    g.pointwise("relu_fwd", y, name="relu").set_output(True).set_name("y")
    return g


def layernorm_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("ln", io_dtype="bfloat16", compute_dtype="float32")
    x, s, b = g.tensor("x", (8, 64)), g.tensor("s", (1, 64)), g.tensor("b", (1, 64))
    y, _, _ = g.layernorm("inference", x, s, b, epsilon=1e-3, name="ln")
    y.set_output(True).set_name("y")
    return g


def matmul_graph() -> sigdnn.Graph:
    g = sigdnn.Graph("mm", io_dtype="float16", compute_dtype="float32")
    g.matmul(g.tensor("a", (16, 256)), g.tensor("b", (256, 8)), name="mm").set_output(True).set_name("c")
    return g


def attention_graph() -> sigdnn.Graph:
    """Attention's score-rounding allowance is measured by reference runs with q and k moved: on either truth."""
    g = sigdnn.Graph("attn", io_dtype="bfloat16", compute_dtype="float32")
    q, k, v = g.tensor("q", (1, 2, 24, 16)), g.tensor("k", (1, 1, 40, 16)), g.tensor("v", (1, 1, 40, 16))
    o, stats = g.sdpa(q, k, v, 0.25, None, True, True, name="sdpa")
    o.set_output(True).set_name("o")
    stats.set_output(True).set_name("stats")
    return g


class ShiftedConv(ReferenceConvFprop):
    """Off by one: reads x one column to the right."""

    name, engine_id, library, priority = "plugin.shifted_conv", 31401, "plugin", 10

    def build(self, node, graph, context):
        honest = super().build(node, graph, context)

        class Plan(NodePlan):
            def execute(self, buffers, context=None) -> None:
                x = np.roll(buffers["x"], -1, axis=3)
                honest.execute({**buffers, "x": x}, context)

        return Plan()


class WrongEpsilonLayernorm(ReferenceLayernorm):
    name, engine_id, library, priority = "plugin.wrong_epsilon", 31402, "plugin", 10

    def build(self, node, graph, context):
        import attrs

        wrong = attrs.evolve(node, op=attrs.evolve(node.op, epsilon=node.op.epsilon * 10))
        return super().build(wrong, graph, context)


class HalfAccumulationMatmul(PlanBuilder):
    """Sums the products in float16, as a kernel with a half-precision accumulator would."""

    name, engine_id, library, ops, priority = "plugin.half_matmul", 31403, "plugin", ("matmul",), 10

    def build(self, node, graph, context):
        class Plan(NodePlan):
            def execute(self, buffers, context=None) -> None:
                a, b = buffers["a"].astype(np.float16), buffers["b"].astype(np.float16)
                acc = np.zeros((a.shape[0], b.shape[1]), np.float16)
                for k in range(a.shape[1]):
                    acc = (acc + a[:, k : k + 1] * b[k : k + 1, :]).astype(np.float16)
                buffers["c"][...] = acc

        return Plan()


def device(builder: PlanBuilder | None) -> sigdnn.Executor:
    registry = Registry()
    if builder is not None:
        registry.register(builder)
    return sigdnn.Executor("reference", registry=registry)


CASES = [
    (conv_graph, ShiftedConv),
    (layernorm_graph, WrongEpsilonLayernorm),
    (matmul_graph, HalfAccumulationMatmul),
    (attention_graph, lambda: FlashSdpa(scale_error=1.02)),
]


@pytest.mark.parametrize(
    ("graph", "planted"), CASES, ids=["off_by_one", "wrong_epsilon", "half_accumulation", "attention_scale"]
)
def test_a_planted_bug_fails_with_either_truth(graph, planted) -> None:
    g = graph()
    inputs = random_inputs(g, 3)
    by_cpu = sigdnn.validate(g, inputs, executor=device(planted()), truth="cpu")
    by_gpu = sigdnn.validate(g, inputs, executor=device(planted()), truth=gpu_reference_executor(fusion=False))
    assert not by_cpu.passed and not by_gpu.passed
    assert (by_cpu.truth, by_gpu.truth) == ("cpu", "gpu")
    assert "against the GPU reference: FAIL" in by_gpu.table()
    failed = {c.node for c in by_cpu.failures}
    assert failed == {c.node for c in by_gpu.failures} and failed
    # the same truth values and the same carried tolerances: every comparison comes out the same
    assert [c.comparison for c in by_cpu.nodes] == [c.comparison for c in by_gpu.nodes]
    assert by_cpu.outputs == by_gpu.outputs


@pytest.mark.parametrize("graph", [conv_graph, layernorm_graph, matmul_graph, attention_graph])
def test_an_honest_device_passes_with_either_truth(graph) -> None:
    g = graph()
    inputs = random_inputs(g, 3)
    by_gpu = sigdnn.validate(g, inputs, executor=device(None), truth=gpu_reference_executor(fusion=False))
    assert by_gpu.passed, by_gpu.table()
    assert sigdnn.validate(g, inputs, executor=device(None), truth="cpu").passed


def test_the_default_truth_is_the_gpu_reference_where_it_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    assert truth_module.default_truth() == "gpu"  # made available by the fixture
    from sigdnn.plan_builders.gpu_reference import base

    monkeypatch.setattr(base, "unavailable_reason", lambda: "no GPU here")
    assert truth_module.default_truth() == "cpu"
    report = sigdnn.validate(matmul_graph(), executor=device(None))
    assert report.truth == "cpu" and '"truth": "cpu"' in report.to_json()


def test_a_truth_is_named_or_a_reference_executor() -> None:
    with pytest.raises(UsageError, match="expected one of gpu, cpu"):
        truth_module.truth_executor("tpu")
    with pytest.raises(UsageError, match="reference backend"):
        truth_module.truth_executor(sigdnn.Executor("gpu"))
    assert truth_module.truth_executor("gpu").backend == "gpu-reference"
    assert truth_module.truth_executor("cpu").registry is truth_module.REFERENCE_ONLY


def test_the_truth_executors_plan_node_by_node_with_their_own_builders_alone() -> None:
    for name, library in (("cpu", "reference"), ("gpu", "gpu_reference")):
        executor = truth_module.truth_executor(name)
        assert executor.fusion is False
        assert {b.library for b in executor.registry.builders()} == {library}
    shipped = [k for k, c in OP_CLASSES.items() if c.__module__.startswith("sigdnn.")]  # not a test-registered op
    assert len(truth_module.GPU_REFERENCE_ONLY.builders()) == len(shipped)  # one per op
    assert truth_module.GPU_REFERENCE_ONLY.load_failures == {}


def test_a_truth_plan_runs_with_its_executors_device_and_stream() -> None:
    from types import SimpleNamespace

    from sigdnn.runtime.device import Device, ExecutionContext

    assert truth_module.run_context(sigdnn.Executor("reference")) == ExecutionContext()
    gpu = truth_module.truth_executor("gpu")
    device = Device("gpu", SimpleNamespace(stream_handle=7))
    gpu._memory = SimpleNamespace(device=device, context=device.context)
    assert truth_module.run_context(gpu) == ExecutionContext(device, 7)
    emulated = gpu_reference_executor()
    assert truth_module.run_context(emulated).stream is None and truth_module.run_context(emulated).device.kind == "gpu"
