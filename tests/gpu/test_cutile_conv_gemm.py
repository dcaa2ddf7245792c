"""cuTile implicit-GEMM conv fprop on the GPU: against torch's float64 conv and through sigdnn.validate.

The cases of tests/conv_gemm_cases.py plus layers of the float32 NCHW
models torchvision exports to ONNX (ResNet-50's stem and a 3x3 layer,
VGG's first layer), compiled by cuTile and run on the device: small-integer
inputs must give torch's conv rounded once, bit for bit; normal inputs must
pass validation; the same for conv_dgrad and conv_wgrad (tests/conv_backward_cases.py). The
emulator runs the same kernel text in
tests/plan_builders/cutile/test_emulated_conv_gemm.py and
test_emulated_conv_backward_gemm.py. A planted dropped K step must fail
validation.
"""

from __future__ import annotations

import attrs
import conv_backward_cases as dgrad
import numpy as np
import pytest
from conv_gemm_cases import CASES
from conv_grouped_cases import Case, exact_inputs, graph, rounded_oracle
from hypothesis import given, settings
from oracles_conv import exact_round

import sigdnn
from sigdnn.accuracy.inputs import random_inputs
from sigdnn.plan_builders.cutile.conv_gemm import CutileConvGemmBuilder

pytestmark = pytest.mark.gpu

BUILDER = "cutile.conv_fprop_gemm"
DGRAD_LAYERS = [
    Case("onnx_resnet_3x3_s2_dgrad_f32", (4, 128, 28, 28), (128, 128, 3, 3), "NCHW", (1, 1), (1, 1), (2, 2), (1, 1)),
]
MODEL_LAYERS = [
    Case("onnx_resnet_stem_f32", (4, 3, 224, 224), (64, 3, 7, 7), "NCHW", (3, 3), (3, 3), (2, 2), (1, 1)),
    Case("onnx_resnet_3x3_f32", (4, 128, 28, 28), (128, 128, 3, 3), "NCHW", (1, 1), (1, 1), (1, 1), (1, 1)),
    Case("onnx_vgg_first_f16_nchw", (2, 3, 224, 224), (64, 3, 3, 3), "NCHW", (1, 1), (1, 1), (1, 1), (1, 1),
         "float16"),
]  # fmt: skip
ALL = CASES + MODEL_LAYERS


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_small_integers_give_torchs_conv_rounded_once_on_the_gpu(case: Case) -> None:
    g = graph(case)
    inputs = exact_inputs(g, seed=len(case.name))
    executor = sigdnn.Executor("gpu", engine=BUILDER)
    got = executor.run(g, inputs)["conv::y"]
    want = rounded_oracle(case, inputs["x"], inputs["w"])
    np.testing.assert_array_equal(np.asarray(got).astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_implicit_gemm_conv_matches_the_reference_on_the_gpu(case: Case) -> None:
    g = graph(case)
    executor = sigdnn.Executor("gpu", engine=BUILDER)
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=executor)
    assert set(report.builders.values()) == {BUILDER}, report.builders
    assert report.passed, report.table()


F32_LAYERS = [c for c in ALL if c.dtype == "float32" and c.w_dtype is None]


@pytest.mark.parametrize("case", F32_LAYERS, ids=[c.name for c in F32_LAYERS])
def test_float32_convs_with_16_bit_compute_run_as_tf32_and_validate_on_the_gpu(case: Case) -> None:
    """The tensor cores' TF32 (10 mantissa bits): visibly off float32's exact products, within the compute
    dtype's tolerance (tests/plan_builders/cutile/test_emulated_conv_tf32.py has the exact oracle)."""
    g = graph(case)
    g.nodes[-1].compute_dtype = sigdnn.DataType.FLOAT16
    inputs = random_inputs(g, seed=len(case.name))
    executor = sigdnn.Executor("gpu", engine=BUILDER)
    report = sigdnn.validate(g, inputs, executor=executor)
    assert report.passed, report.table()
    exact = sigdnn.Executor("gpu", engine=BUILDER).run(graph(case), inputs)["conv::y"]
    assert not np.array_equal(np.asarray(executor.run(g, inputs)["conv::y"]), np.asarray(exact))


class DroppedStep(CutileConvGemmBuilder):
    name = "planted.conv_fprop_gemm"
    engine_id = 30051
    library = "planted"

    def launches(self, node, graph):  # type: ignore[no-untyped-def]
        launches, nbytes = super().launches(node, graph)
        drop = lambda text: text.replace("steps = ct.cdiv(reduction, TK)", "steps = reduction // TK")  # noqa: E731
        assert all(drop(la.source.text) != la.source.text for la in launches[:1])
        return [attrs.evolve(la, source=attrs.evolve(la.source, text=drop(la.source.text))) for la in launches], nbytes


def test_a_planted_dropped_k_step_fails_validation_on_the_gpu() -> None:
    registry = sigdnn.Registry(entry_point_group=None)
    registry.register(DroppedStep())
    g = graph(CASES[0])
    executor = sigdnn.Executor("gpu", registry=registry, engine="planted.conv_fprop_gemm")
    assert not sigdnn.validate(g, random_inputs(g, seed=5), executor=executor).passed


DGRAD = dgrad.CASES + DGRAD_LAYERS


@pytest.mark.parametrize("case", DGRAD, ids=[c.name for c in DGRAD])
def test_dgrad_small_integers_give_torchs_dx_rounded_once_on_the_gpu(case: Case) -> None:
    g = dgrad.dgrad_graph(case)
    rng = np.random.default_rng(len(case.name))
    inputs = {t.name: rng.integers(-4, 5, size=t.dims).astype(g.dtype_of(t).numpy) for t in g.inputs}
    got = sigdnn.Executor("gpu", engine="cutile.conv_dgrad_gemm").run(g, inputs)["dx"]
    want = exact_round(dgrad.torch_dgrad(case, inputs["dy"], inputs["w"]), case.dtype)
    np.testing.assert_array_equal(np.asarray(got).astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("case", DGRAD, ids=[c.name for c in DGRAD])
def test_dgrad_matches_the_reference_on_the_gpu(case: Case) -> None:
    g = dgrad.dgrad_graph(case)
    executor = sigdnn.Executor("gpu", engine="cutile.conv_dgrad_gemm")
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=executor)
    assert report.passed, report.table()


@pytest.mark.parametrize("case", DGRAD, ids=[c.name for c in DGRAD])
def test_wgrad_matches_the_reference_on_the_gpu(case: Case) -> None:
    g = dgrad.wgrad_graph(case)
    executor = sigdnn.Executor("gpu", engine="cutile.conv_wgrad_gemm")
    report = sigdnn.validate(g, random_inputs(g, seed=len(case.name)), executor=executor)
    assert report.passed, report.table()


@pytest.mark.parametrize("kind", list(dgrad.ENGINES))
@settings(max_examples=25, deadline=None)
@given(case=dgrad.random_cases())
def test_random_convolutions_give_torchs_result_rounded_once_on_the_gpu(kind: str, case: Case) -> None:
    """The emulator's hypothesis test (test_emulated_conv_gemm_properties.py), compiled by cuTile."""
    got, want = dgrad.run_exact(kind, case, sigdnn.Executor("gpu", engine=dgrad.ENGINES[kind]))
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64), err_msg=repr(case))
