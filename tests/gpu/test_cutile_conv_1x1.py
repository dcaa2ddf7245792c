"""``cutile.conv_fprop_1x1`` on the GPU: 1x1 convs as cutile.matmul GEMMs over the tensors' own memory.

The cases of tests/conv_1x1_cases.py plus ResNet-50's float32 NCHW
bottleneck convs at batch 1 and 4 (as torchvision's ONNX export runs them;
batch 1 splits K): small-integer inputs must give torch's float64 conv
rounded once, bit for bit; normal inputs must pass ``sigdnn.validate``, and
with ``allow_tf32`` too (TF32, within its tolerance). The emulator runs the
same kernels in tests/plan_builders/cutile/test_emulated_conv_1x1.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from conv_1x1_cases import CASES, one_by_one
from conv_grouped_cases import Case, exact_inputs, graph, rounded_oracle

import sigdnn
from sigdnn.accuracy.inputs import random_inputs

pytestmark = pytest.mark.gpu

BUILDER = "cutile.conv_fprop_1x1"
ALL = [
    *CASES,
    one_by_one("onnx_resnet_expand_b1_f32", (1, 256, 14, 14), 1024, "NCHW"),
    one_by_one("onnx_resnet_reduce_b4_f32", (4, 2048, 7, 7), 512, "NCHW"),
]


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_small_integers_give_torchs_conv_rounded_once_on_the_gpu(case: Case) -> None:
    g = graph(case)
    inputs = exact_inputs(g, seed=len(case.name))
    got = sigdnn.Executor("gpu", engine=BUILDER).run(g, inputs)["conv::y"]
    want = rounded_oracle(case, inputs["x"], inputs["w"])
    np.testing.assert_array_equal(np.asarray(got).astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("tf32", [False, True])
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_matches_the_reference_on_the_gpu(case: Case, tf32: bool) -> None:
    g = graph(case)
    if tf32:
        sigdnn.allow_tf32(g)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=sigdnn.Executor("gpu", engine=BUILDER))
    assert set(report.builders.values()) == {BUILDER}, report.builders
    assert report.passed, report.table()
