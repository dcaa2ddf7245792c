"""The conv fprop builders on cutile.matmul's GEMM kernel, on the GPU: ``cutile.conv_fprop_1x1`` (1x1 convs as GEMMs
over the tensors' own memory) and ``cutile.conv_fprop_im2col`` (A gathered once into the workspace).

Their emulator cases (tests/conv_1x1_cases.py; the ungrouped cases of
tests/conv_gemm_cases.py with the filter in x's layout) plus the float32 NCHW
layers torchvision's ONNX exports run, at batch 1 (a split-K GEMM) and 4:
small-integer inputs must give torch's float64 conv rounded once, bit for
bit; normal inputs must pass ``sigdnn.validate``, and with ``allow_tf32``
too. The emulator runs the same kernels in
tests/plan_builders/cutile/test_emulated_gemm_convs.py (and each
builder's own file).
"""

from __future__ import annotations

import numpy as np
import pytest
from conv_1x1_cases import CASES as ONE_BY_ONE
from conv_1x1_cases import im2col_cases, one_by_one
from conv_grouped_cases import Case, exact_inputs, graph, rounded_oracle

import sigdnn
from sigdnn.accuracy.inputs import random_inputs

pytestmark = pytest.mark.gpu

ONE_BY_ONE_LAYERS = [
    *ONE_BY_ONE,
    one_by_one("onnx_resnet_expand_b1_f32", (1, 256, 14, 14), 1024, "NCHW"),
    one_by_one("onnx_resnet_reduce_b4_f32", (4, 2048, 7, 7), 512, "NCHW"),
]
IM2COL_LAYERS = [
    *im2col_cases(),
    Case("onnx_vgg_14x14_512_b1_f32", (1, 512, 14, 14), (512, 512, 3, 3), "NCHW", (1, 1), (1, 1), (1, 1), (1, 1)),
    Case("onnx_resnet_stem_b1_f32", (1, 3, 224, 224), (64, 3, 7, 7), "NCHW", (3, 3), (3, 3), (2, 2), (1, 1)),
    Case("onnx_resnet_3x3_b4_f32", (4, 128, 28, 28), (128, 128, 3, 3), "NCHW", (1, 1), (1, 1), (1, 1), (1, 1)),
]
ALL = [("cutile.conv_fprop_1x1", c) for c in ONE_BY_ONE_LAYERS] + [
    ("cutile.conv_fprop_im2col", c) for c in IM2COL_LAYERS
]
IDS = [f"{b.split('_')[-1]}-{c.name}" for b, c in ALL]


@pytest.mark.parametrize(("builder", "case"), ALL, ids=IDS)
def test_small_integers_give_torchs_conv_rounded_once_on_the_gpu(builder: str, case: Case) -> None:
    g = graph(case)
    inputs = exact_inputs(g, seed=len(case.name))
    got = sigdnn.Executor("gpu", engine=builder).run(g, inputs)["conv::y"]
    want = rounded_oracle(case, inputs["x"], inputs["w"])
    np.testing.assert_array_equal(np.asarray(got).astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("tf32", [False, True])
@pytest.mark.parametrize(("builder", "case"), ALL, ids=IDS)
def test_matches_the_reference_on_the_gpu(builder: str, case: Case, tf32: bool) -> None:
    g = graph(case)
    if tf32:
        sigdnn.allow_tf32(g)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=sigdnn.Executor("gpu", engine=builder))
    assert set(report.builders.values()) == {builder}, report.builders
    assert report.passed, report.table()
