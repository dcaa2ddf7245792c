"""Models exported to ONNX by torch run strict on the GPU backend (the emulator) and validate step by step.

torch.onnx.export writes float32 NCHW: every conv goes to a cuTile builder
(the implicit GEMM, or the direct kernel for depthwise), pooling, batchnorm,
softmax, layernorm, matmul and the pointwise regions to theirs. A strict
Executor("gpu") raises NoPlanError on a node no GPU builder takes, so
planning alone proves there is no fallback; validation then checks every
step's result, computed by the emulated kernels, against the CPU reference,
and the GPU's fast path (the plan bound to device memory, graph constants
staged once) must give the validated outputs bit for bit.
benchmarks/models.py --onnx runs torchvision's own exports on the H200.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnx")

from emulated import assert_fast_path_gives, emulated_executor, make_available  # noqa: E402
from importers.onnx_models import (  # noqa: E402
    encoder,
    export,
    mobilenet_v3_small_like,
    resnet18,
    segmenter,
    vit_b_16_like,
)  # fmt: skip

import sigdnn  # noqa: E402
from sigdnn.importers import onnx as onnx_import  # noqa: E402
from sigdnn.plan_builders.cutile import matmul as cutile_matmul  # noqa: E402

MODELS = {
    "resnet18": (lambda: resnet18(), (1, 3, 64, 64), {"cutile.conv_fprop_im2col", "cutile.pooling"}),
    "mobilenet_v3_small": (lambda: mobilenet_v3_small_like(), (2, 3, 32, 32),
                           {"cutile.conv_fprop_im2col", "cutile.conv_fprop_1x1", "cutile.conv_fprop_grouped"}),
    "vit": (lambda: vit_b_16_like(d=32, layers=2, heads=4, ff=64), (1, 3, 224, 224),
            {"cutile.conv_fprop_im2col", "cutile.matmul", "cutile.softmax", "cutile.layernorm"}),
    "encoder": (lambda: encoder(), (2, 10, 32), {"cutile.matmul", "cutile.softmax", "cutile.layernorm"}),
    "segmenter": (lambda: segmenter(), (2, 3, 28, 36), {"cutile.conv_fprop_im2col", "cutile.resample"}),
}  # fmt: skip


@pytest.fixture(autouse=True)
def _available(monkeypatch):
    make_available(monkeypatch)
    monkeypatch.setattr(cutile_matmul, "unavailable_reason", lambda: None)


@pytest.mark.parametrize("name", MODELS)
def test_an_exported_model_runs_strict_on_the_gpu_and_validates(name: str) -> None:
    make, shape, builders = MODELS[name]
    x = np.random.default_rng(len(name)).standard_normal(shape).astype(np.float32)
    graph = onnx_import.load(export(make(), torch.from_numpy(x)))
    executor = emulated_executor()
    plan = executor.prepare(graph)  # strict: NoPlanError on a node no GPU builder takes
    used = Counter(s.builder.name for s in plan.steps)
    assert builders <= set(used), used
    assert all(b.startswith("cutile.") or b == "view" for b in used), used
    got: dict[str, np.ndarray] = {}
    report = sigdnn.validate(graph, {"x": x}, executor=executor, truth="cpu", got=got)
    assert report.passed, report.table()
    assert_fast_path_gives(graph, {"x": x}, got)
