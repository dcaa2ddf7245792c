"""cuTile grouped / depthwise conv fprop on the GPU: against torch's float64 conv and through sigdnn.validate.

The cases of tests/conv_grouped_cases.py (depthwise multiplier 1 and 2,
G = 2 / 3 / 4 with C/G = 2 or 3, 1 to 3 spatial dims, both layouts, odd and
size-1 dims, asymmetric padding, stride 2, dilation 2, gapped x) plus
MobileNet / EfficientNet / ResNeXt-sized layers, compiled by cuTile and run
on the device: small-integer inputs must give torch's conv rounded once, bit
for bit; normal inputs must pass validation. The emulator runs the same
kernel text in tests/plan_builders/cutile/test_emulated_conv_grouped.py. A
planted dropped tap must fail validation.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from conv_grouped_cases import CASES, Case, exact_inputs, graph, rounded_oracle

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.plan_builders.cutile.conv_grouped import CutileConvGroupedBuilder

pytestmark = pytest.mark.gpu

BUILDER = "cutile.conv_fprop_grouped"
MODEL_LAYERS = [
    Case("mobilenet_dw_5x5_s2", (8, 96, 28, 28), (96, 1, 5, 5), "NHWC", (2, 2), (2, 2), (2, 2), (1, 1), "bfloat16"),
    Case("efficientnet_dw_3x3", (8, 144, 56, 56), (144, 1, 3, 3), "NHWC", (1, 1), (1, 1), (1, 1), (1, 1),
         "float16"),
    Case("onnx_dw_nchw_f32", (4, 240, 14, 14), (240, 1, 5, 5), "NCHW", (2, 2), (2, 2), (1, 1), (1, 1)),
    Case("resnext_g32_c4", (4, 128, 28, 28), (128, 4, 3, 3), "NHWC", (1, 1), (1, 1), (1, 1), (1, 1), "bfloat16"),
]  # fmt: skip
ALL = CASES + MODEL_LAYERS


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_small_integers_give_torchs_conv_rounded_once_on_the_gpu(case: Case) -> None:
    g = graph(case)
    inputs = exact_inputs(g, seed=len(case.name))
    executor = sigdnn.Executor("gpu")
    plan = executor.prepare(g)
    assert [s.builder.name for s in plan.steps] == [BUILDER]
    got = executor.execute(plan, inputs)["conv::y"]
    want = rounded_oracle(case, inputs["x"], inputs["w"])
    np.testing.assert_array_equal(np.asarray(got).astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_grouped_conv_matches_the_reference_on_the_gpu(case: Case) -> None:
    g = graph(case)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), backend="gpu")
    assert set(report.builders.values()) == {BUILDER}, report.builders
    assert report.passed, report.table()


class DroppedTap(CutileConvGroupedBuilder):
    name = "planted.conv_fprop_grouped"
    engine_id = 30050
    library = "planted"

    def launches(self, node, graph):  # type: ignore[no-untyped-def]
        launches, nbytes = super().launches(node, graph)
        drop = lambda text: text.replace("for e in range(kw):", "for e in range(kw - 1):")  # noqa: E731
        return [attrs.evolve(la, source=attrs.evolve(la.source, text=drop(la.source.text))) for la in launches], nbytes


def test_a_planted_dropped_tap_fails_validation_on_the_gpu() -> None:
    registry = sigdnn.Registry(entry_point_group=None)
    registry.register(DroppedTap())
    g = graph(CASES[0])
    executor = sigdnn.Executor("gpu", registry=registry, engine="planted.conv_fprop_grouped")
    assert not sigdnn.validate(g, random_inputs(g, seed=5), executor=executor).passed
