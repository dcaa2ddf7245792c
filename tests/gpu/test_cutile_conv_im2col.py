"""``cutile.conv_fprop_im2col`` on the GPU: A gathered once into the workspace, then cutile.matmul's GEMM.

The emulator's cases (tests/plan_builders/cutile/test_emulated_conv_im2col.py)
plus the float32 NCHW layers torchvision's ONNX exports run at batch 1 (a
split-K GEMM) and 4: small-integer inputs must give torch's float64 conv
rounded once, bit for bit; normal inputs must pass ``sigdnn.validate``, and
with ``allow_tf32`` too.
"""

from __future__ import annotations

import numpy as np
import pytest
from conv_1x1_cases import CASES as ONE_BY_ONE
from conv_gemm_cases import CASES as GEMM_CASES
from conv_grouped_cases import Case, exact_inputs, graph, rounded_oracle

import sigdnn
from sigdnn.accuracy.inputs import random_inputs

pytestmark = pytest.mark.gpu

BUILDER = "cutile.conv_fprop_im2col"
ALL = [
    *(c for c in GEMM_CASES + ONE_BY_ONE if c.groups == 1 and c.w_layout in (None, c.layout)),
    Case("onnx_vgg_14x14_512_b1_f32", (1, 512, 14, 14), (512, 512, 3, 3), "NCHW", (1, 1), (1, 1), (1, 1), (1, 1)),
    Case("onnx_resnet_stem_b1_f32", (1, 3, 224, 224), (64, 3, 7, 7), "NCHW", (3, 3), (3, 3), (2, 2), (1, 1)),
    Case("onnx_resnet_3x3_b4_f32", (4, 128, 28, 28), (128, 128, 3, 3), "NCHW", (1, 1), (1, 1), (1, 1), (1, 1)),
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
