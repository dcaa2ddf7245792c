"""What the CuTe fusion builders claim on a Hopper GPU, decided without one (the device facts stubbed)."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.plan_builders import gpu_properties
from sigdnn.plan_builders.cute import conv_implicit
from sigdnn.plan_builders.cute import matmul as cute_matmul
from sigdnn.plan_builders.cute.conv_implicit import CuteConvImplicitBuilder
from sigdnn.plan_builders.cute.matmul import CuteMatmulBuilder
from sigdnn.runtime.device import Device


@pytest.fixture
def hopper(monkeypatch):
    """The DSL importable and device 0 an sm_90 part with 132 SMs (or ``capability`` when set)."""
    state = {"capability": (9, 0)}
    monkeypatch.setattr(cute_matmul, "unavailable_reason", lambda: None)
    monkeypatch.setattr(gpu_properties, "device_properties", lambda device_id: (state["capability"], 132))
    monkeypatch.setattr(conv_implicit, "unavailable_reason", lambda: None)
    return state


GPU = Device("gpu", None)


def mm_bias_gelu() -> sigdnn.Graph:
    g = sigdnn.Graph("mm", io_dtype="bfloat16", compute_dtype="float32")
    y = g.matmul(g.tensor("a", (256, 128)), g.tensor("b", (128, 512)), name="mm")
    y = g.pointwise("add", y, g.tensor("bias", (1, 512)), name="bias")
    g.pointwise("gelu_fwd", y, name="act").set_output(True)
    return g


def conv_bias_relu() -> sigdnn.Graph:
    g = sigdnn.Graph("conv", io_dtype="bfloat16", compute_dtype="float32")
    x, w = g.tensor("x", (2, 16, 9, 11), layout="NHWC"), g.tensor("w", (24, 16, 3, 3), layout="NHWC")
    y = g.conv_fprop(x, w, name="conv", padding=(1, 1))
    y = g.pointwise("add", y, g.tensor("bias", (1, 24, 1, 1), layout="NHWC"), name="bias")
    g.pointwise("relu_fwd", y, name="act").set_output(True)
    return g


@pytest.mark.parametrize(
    ("builder", "graph"), [(CuteMatmulBuilder, mm_bias_gelu), (CuteConvImplicitBuilder, conv_bias_relu)]
)
def test_hopper_claims_the_epilogue_chain(hopper, builder, graph):
    g = graph()
    regions = builder().claim(g, list(range(len(g.nodes))), GPU)
    assert [r.nodes for r in regions] == [(0, 1, 2)]


@pytest.mark.parametrize(
    ("builder", "graph"), [(CuteMatmulBuilder, mm_bias_gelu), (CuteConvImplicitBuilder, conv_bias_relu)]
)
def test_another_architecture_claims_nothing(hopper, builder, graph):
    hopper["capability"] = (10, 0)
    g = graph()
    assert builder().claim(g, list(range(len(g.nodes))), GPU) == []


def test_the_cpu_claims_nothing(hopper):
    g = mm_bias_gelu()
    assert CuteMatmulBuilder().claim(g, [0, 1, 2], Device("cpu", None)) == []
