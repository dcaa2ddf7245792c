"""Which matmul -> bias -> activation chains the CuTe builder fuses (pure Python, runs without a GPU)."""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.matmul import CuteMatmulBuilder, epilogue_chain
from sigdnn.registry.regions import Dataflow


def chain_graph(
    *,
    bias_dims: tuple[int, ...] | None = (1, 64),
    activation: str | None = "gelu_fwd",
    intermediate: str | None = None,
    c_is_output: bool = False,
    extra_reader: bool = False,
    relu_clip: float | None = None,
) -> sigdnn.Graph:
    g = sigdnn.Graph("chain", io_dtype="bfloat16", intermediate_dtype=intermediate, compute_dtype="float32")
    a, b = g.tensor("a", (32, 48)), g.tensor("b", (48, 64))
    y = g.matmul(a, b, name="mm")
    if c_is_output:
        y.set_output(True)
    if bias_dims is not None:
        y = g.pointwise("add", y, g.tensor("bias", bias_dims), name="bias")
    if extra_reader:
        g.pointwise("tanh_fwd", y, name="other").set_output(True)
    if activation is not None:
        params = {} if relu_clip is None else {"relu_upper_clip": relu_clip}
        y = g.pointwise(activation, y, name="act", **params)
    y.set_output(True).set_name("out")
    return g


def chain_of(g: sigdnn.Graph):
    order = list(range(len(g.nodes)))
    return epilogue_chain(g, Dataflow(g, order), 0)


def names(g: sigdnn.Graph, chain) -> list[str]:
    return [g.nodes[i].name for i in chain.nodes]


def test_bias_and_gelu_are_absorbed() -> None:
    g = chain_graph()
    chain = chain_of(g)
    assert names(g, chain) == ["mm", "bias", "act"]
    assert chain.activation == "gelu" and chain.bias == g.tensor_by_name("bias").uid
    assert chain.writes[-1] == g.tensor_by_name("out").uid


@pytest.mark.parametrize(("mode", "act"), [("relu_fwd", "relu"), ("gelu_approx_tanh_fwd", "gelu_tanh")])
def test_activation_without_bias(mode: str, act: str) -> None:
    g = chain_graph(bias_dims=None, activation=mode)
    chain = chain_of(g)
    assert names(g, chain) == ["mm", "act"] and chain.activation == act and chain.bias is None


def test_bias_without_activation() -> None:
    g = chain_graph(activation=None)
    assert names(g, chain_of(g)) == ["mm", "bias"]


@pytest.mark.parametrize(
    "kw",
    [
        {"bias_dims": (32, 64), "activation": None},  # a full matrix, not a bias row
        {"bias_dims": (32, 1), "activation": None},  # a column, not a row
        {"c_is_output": True},  # the product itself is wanted
        {"bias_dims": None, "activation": "tanh_fwd"},  # not an epilogue activation
    ],
)
def test_nothing_to_fuse(kw: dict) -> None:
    assert chain_of(chain_graph(**kw)) is None


def test_a_second_reader_stops_the_chain_before_it() -> None:
    g = chain_graph(extra_reader=True)
    assert names(g, chain_of(g)) == ["mm", "bias"]


def test_clipped_relu_is_left_alone() -> None:
    g = chain_graph(bias_dims=None, activation="relu_fwd", relu_clip=6.0)
    assert chain_of(g) is None


def test_intermediate_dtypes_become_rounding_points() -> None:
    g = chain_graph(intermediate="bfloat16")
    chain = chain_of(g)
    spec, _ = CuteMatmulBuilder().plan(g.node_by_name("mm"), g, chain)
    assert (spec.bias_dtype, spec.activation, spec.round_x, spec.round_y) == (
        "bfloat16",
        "gelu",
        "bfloat16",
        "bfloat16",
    )
    g = chain_graph()  # virtual tensors default to the compute dtype
    spec, _ = CuteMatmulBuilder().plan(g.node_by_name("mm"), g, chain_of(g))
    assert (spec.round_x, spec.round_y) == ("float32", "float32")


def test_plan_rejects_a_chain_whose_output_tma_cannot_store() -> None:
    g = chain_graph()
    g.tensor_by_name("out").set_stride((1, 31))  # column-major with a 62-byte leading stride
    with pytest.raises(NotSupported, match="16 bytes"):
        CuteMatmulBuilder().plan(g.node_by_name("mm"), g, chain_of(g))
