"""sigdnn.models' training graphs run strict on cuTile alone (the emulator) and validate step by step.

With the CuTe builders unavailable (no GPU), every node goes to a cuTile builder or the graph has no plan:
a narrow ResNet-50 training step (convs forward and backward, batchnorm, pooling) in float32 and bfloat16,
and a small Llama decoder layer forward + backward (GEMMs, rmsnorm, rotary, grouped-query attention and
its backward) at head dims 128 and 80, in bfloat16, float32 and float16. Validation's truth is the CPU
reference.
"""

from __future__ import annotations

from collections import Counter

import pytest
from emulated import emulated_executor, make_available

import sigdnn
from sigdnn.accuracy.inputs import initialized_inputs
from sigdnn.models import llama_layer, resnet50_training
from sigdnn.plan_builders.cutile import matmul as cutile_matmul


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: None)


def strict_and_valid(g: sigdnn.Graph, must_use: set[str]) -> None:
    executor = emulated_executor()
    plan = executor.prepare(g)  # strict: NoPlanError on a node no GPU builder takes
    used = Counter(s.builder.name for s in plan.steps)
    assert all(b.startswith("cutile.") or b == "view" for b in used), used
    assert must_use <= set(used), used
    report = sigdnn.validate(g, initialized_inputs(g), executor=executor, truth="cpu")
    assert report.passed, report.table()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_a_resnet_training_step_runs_on_cutile_alone(dtype: str) -> None:
    g = resnet50_training(batch=2, image=64, classes=10, width=16, blocks=(1, 1, 1, 1), dtype=dtype)
    convs = {"cutile.conv_fprop_im2col", "cutile.conv_fprop_1x1", "cutile.conv_dgrad_gemm", "cutile.conv_wgrad_gemm"}
    strict_and_valid(g, convs | {"cutile.batchnorm_backward", "cutile.pooling_backward"})


@pytest.mark.parametrize(("dtype", "dim"), [("bfloat16", 256), ("float32", 256), ("float16", 160)])
def test_a_llama_layer_forward_and_backward_runs_on_cutile_alone(dtype: str, dim: int) -> None:
    g = llama_layer(batch=1, seq=70, dim=dim, heads=2, kv_heads=1, hidden=384, backward=True, dtype=dtype)
    strict_and_valid(g, {"cutile.sdpa", "cutile.sdpa_backward", "cutile.matmul", "cutile.rmsnorm_backward"})
