"""Which configurations the CuTe GEMM and implicit-conv builders offer autotune (pure Python, no GPU)."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.matmul import CuteMatmulBuilder, parse_config
from sigdnn.registry.contracts import BuildContext
from sigdnn.signature_keys import key_for


def matmul(m: int, n: int, k: int, dtype: str = "bfloat16", epilogue: str | None = None) -> sigdnn.Graph:
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    a = g.tensor("a", (m, k)).set_data_type(dtype)
    b = g.tensor("b", (k, n), (1, k)).set_data_type(dtype)  # column-major: fp8 wgmma reads K-major operands
    y = g.matmul(a, b, name="mm")
    if epilogue is not None:
        y = g.pointwise("add", y, g.tensor("bias", (1, n)), name="bias")
        y = g.pointwise(epilogue, y, name="act")
    y.set_output(True).set_name("out")
    return g


def configs(g: sigdnn.Graph, nodes=None) -> list[str]:
    return CuteMatmulBuilder().configs(g.nodes if nodes is None else nodes, g)


def test_large_bf16_gemm_offers_its_default_first_then_the_alternatives():
    assert configs(matmul(4096, 4096, 4096)) == ["coop128x256c2x1s4n", "pp64x256c2x1s4n", "coop128x128c1x1s1"]


def test_a_gelu_region_starts_with_pingpong_tiles():
    g = matmul(4096, 4096, 4096, epilogue="gelu_fwd")
    assert configs(g) == ["pp64x256c2x1s4n", "coop128x256c2x1s4n", "coop128x128c1x1s1"]


def test_a_bias_relu_region_keeps_cooperative_tiles_first():
    g = matmul(4096, 4096, 4096, epilogue="relu_fwd")
    assert configs(g)[0] == "coop128x256c2x1s4n"


def test_a_small_gemm_starts_with_unclustered_128x128_tiles():
    assert configs(matmul(256, 512, 1024)) == ["coop128x128c1x1s1", "coop128x256c2x1s4n", "pp64x256c2x1s4n"]


def test_fp8_offers_only_tiles_whose_promoted_accumulators_fit():
    labels = configs(matmul(4096, 4096, 4096, dtype="float8_e4m3fn"))
    assert labels == ["coop128x128c1x2s4", "coop128x128c2x1s4", "coop128x128c1x1s1"]
    assert all(parse_config(label).accumulator_registers(fp8=True) <= 208 for label in labels)


def test_every_offered_label_parses_back_to_itself():
    for g in (matmul(4096, 4096, 4096), matmul(100, 200, 304, epilogue="gelu_fwd")):
        for label in configs(g):
            assert parse_config(label).label == label


def test_an_unknown_label_is_declined_before_the_device_is_asked():
    g = matmul(256, 256, 256)
    node = g.nodes[0]
    context = BuildContext(key_for(node, g), None, g, "coop999x1")
    with pytest.raises(NotSupported, match="node 'mm': bad GEMM config label 'coop999x1'"):
        CuteMatmulBuilder()._launch(*CuteMatmulBuilder().plan(node, g), context.device, context.config, "node 'mm'")


def test_the_environment_override_comes_first(monkeypatch):
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", "pp128x192c1x1s1")
    assert configs(matmul(4096, 4096, 4096))[0] == "pp128x192c1x1s1"


def conv(k: int, hw: int, c: int = 64, epilogue: bool = False) -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (64, c, hw, hw), layout="NHWC"), g.tensor("w", (k, c, 3, 3), layout="NHWC")
    y = g.conv_fprop(x, w, name="conv", padding=(1, 1))
    if epilogue:
        y = g.pointwise("add", y, g.tensor("bias", (1, k, 1, 1), layout="NHWC"), name="bias")
        y = g.pointwise("relu_fwd", y, name="act")
    y.set_output(True)
    return g


def conv_configs(g: sigdnn.Graph) -> list[str]:
    from sigdnn.plan_builders.cute.conv_implicit import CuteConvImplicitBuilder

    return CuteConvImplicitBuilder().configs(g.nodes, g)


def test_conv_offers_its_heuristic_default_first_then_the_wide_tiles():
    assert conv_configs(conv(64, 56)) == [
        "coop256x64c1x1s1", "coop256x128c1x1s1", "coop128x256c1x1s1", "pp128x128c1x1s1"
    ]  # fmt: skip
    assert conv_configs(conv(256, 14))[0] == "coop128x256c1x1s1"


def test_a_late_stage_conv_region_starts_with_pingpong_tiles():
    labels = conv_configs(conv(512, 7, c=512, epilogue=True))
    assert labels[0] == "pp128x128c1x1s1" and len(labels) == len(set(labels)) == 4


def test_conv_keeps_the_environment_override_first(monkeypatch):
    monkeypatch.setenv("SIGDNN_CUTE_GEMM", "coop128x128c1x1s1")
    assert conv_configs(conv(64, 56))[0] == "coop128x128c1x1s1"


def test_a_conv_label_that_does_not_parse_is_declined_naming_the_node():
    from sigdnn.plan_builders.cute.conv_implicit import CuteConvImplicitBuilder, plan_conv

    g = conv(64, 56)
    with pytest.raises(NotSupported, match="node 'conv': bad GEMM config label"):
        CuteConvImplicitBuilder()._launch(plan_conv(g.nodes[0], g), None, "tile9", "node 'conv'")
