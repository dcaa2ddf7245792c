"""fp8 in the CuTe GEMM's planning (pure Python, runs without a GPU): dtypes, K-major operands, scale chains.

cuDNN-frontend graphs descale an fp8 matmul with pointwise multiplies by
one-value tensors on its float32 output; the builder folds up to two of
them (then the bias and activation) into the GEMM epilogue.
"""

from __future__ import annotations

import re

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.gemm_layout import GemmConfig, default_config, plan_gemm
from sigdnn.plan_builders.cute.matmul import CuteMatmulBuilder, epilogue_chain, parse_config
from sigdnn.registry.regions import Dataflow
from sigdnn.signature_keys import key_for

M, N, K = 208, 80, 96  # multiples of 16: a transposed layout's leading stride stays TMA-aligned
ROW_A, COL_B = (K, 1), (1, K)  # A row-major, B column-major: both contiguous along K


def _plan(a_dt: str, b_dt: str, a_strides=ROW_A, b_strides=COL_B):
    return plan_gemm(((M, K), a_strides, a_dt), ((K, N), b_strides, b_dt), ((M, N), (N, 1), "bfloat16"))


@pytest.mark.parametrize(
    ("a_dt", "b_dt"), [("fp8_e4m3", "fp8_e4m3"), ("fp8_e4m3", "fp8_e5m2"), ("fp8_e5m2", "fp8_e4m3")]
)
def test_fp8_operands_plan_k_major(a_dt: str, b_dt: str) -> None:
    spec, problem = _plan(a_dt, b_dt)
    assert (spec.a_dtype, spec.b_dtype, spec.a_major, spec.b_major, spec.fp8) == (a_dt, b_dt, "k", "k", True)
    assert (problem.m, problem.n, problem.k, problem.lda, problem.ldb) == (M, N, K, K, K)


@pytest.mark.parametrize(
    ("a_strides", "b_strides", "which"),
    [(ROW_A, (N, 1), "b (K x N)"), ((1, M), COL_B, "a (M x K)"), ((1, M), (N, 1), "a (M x K) and b (K x N)")],
)
def test_fp8_operands_not_contiguous_along_k_are_refused(a_strides, b_strides, which: str) -> None:
    with pytest.raises(ValueError, match=r"contiguous along K .*: " + re.escape(which) + " not"):
        _plan("fp8_e4m3", "fp8_e4m3", a_strides, b_strides)
    # the same layouts at 16 bits are fine: wgmma reads those either way
    _plan("bfloat16", "bfloat16", a_strides, b_strides)


@pytest.mark.parametrize(("a_dt", "b_dt"), [("fp8_e4m3", "bfloat16"), ("bfloat16", "float16"), ("float32", "float32")])
def test_operand_dtype_pairs_outside_the_kernel_are_refused(a_dt: str, b_dt: str) -> None:
    with pytest.raises(ValueError, match="operand dtypes"):
        _plan(a_dt, b_dt)


def test_fp8_k_rows_must_be_16_bytes_apart() -> None:
    with pytest.raises(ValueError, match="multiple of 16 elements"):
        plan_gemm(((M, 40), (40, 1), "fp8_e4m3"), ((40, N), (1, 40), "fp8_e4m3"), ((M, N), (N, 1), "float32"))


def test_fp8_config_label_and_registers() -> None:
    fast = parse_config("coop128x256c2x1s4nf")
    assert fast.fast_accum and not fast.raster_along_m and fast.label == "coop128x256c2x1s4nf"
    assert parse_config("coop128x128c2x1s4n").fast_accum is False
    # promotion keeps a second accumulator: 128x256 would need 256 registers per thread
    assert GemmConfig(128, 256).accumulator_registers(fp8=True) == 256
    assert GemmConfig(128, 256, fast_accum=True).accumulator_registers(fp8=True) == 128
    assert GemmConfig(128, 256).accumulator_registers(fp8=False) == 128


def test_default_fp8_config_promotes_within_the_register_budget() -> None:
    spec, _ = _plan("fp8_e4m3", "fp8_e4m3")
    _, big = plan_gemm(((8192, 8192), (8192, 1), "fp8_e4m3"), ((8192, 8192), (1, 8192), "fp8_e4m3"),
                       ((8192, 8192), (8192, 1), "bfloat16"))  # fmt: skip
    config = default_config(spec, big)
    assert not config.fast_accum and config.accumulator_registers(fp8=True) <= 208


def fp8_graph(
    *,
    scales: int = 2,
    scale_dims: tuple[int, ...] = (1, 1, 1),
    bias: bool = False,
    act: str | None = None,
    b_dtype: str = "fp8_e4m3",
    virtual_scale: bool = False,
    pass_by_value: bool = False,
) -> sigdnn.Graph:
    """matmul(fp8, fp8) -> float32, times A's and B's descale, [+ bias], [act], out bf16 (cuDNN's fp8 sample)."""
    g = sigdnn.Graph("fp8", io_dtype="bfloat16", compute_dtype="float32", intermediate_dtype="float32")
    a = g.tensor("a", (M, K), ROW_A, dtype="fp8_e4m3")
    b = g.tensor("b", (K, N), COL_B, dtype=b_dtype)
    y = g.matmul(a, b, name="mm")
    for i in range(scales):
        if pass_by_value:
            s = g.scalar(f"descale{i}", 0.5, dtype="float32")
        elif virtual_scale:
            s = g.pointwise("abs", g.tensor(f"raw{i}", scale_dims, dtype="float32"), name=f"abs{i}")
        else:
            s = g.tensor(f"descale{i}", scale_dims, dtype="float32")
        y = g.pointwise("mul", y, s, name=f"scale{i}")
    if bias:
        y = g.pointwise("add", y, g.tensor("bias", (1, N)), name="bias")
    if act:
        y = g.pointwise(act, y, name="act")
    y.set_output(True).set_name("out")
    return g


def chain_of(g: sigdnn.Graph):
    return epilogue_chain(g, Dataflow(g, list(range(len(g.nodes)))), g.nodes.index(g.node_by_name("mm")))


def test_two_descales_bias_and_gelu_fold_into_one_region() -> None:
    g = fp8_graph(bias=True, act="gelu_fwd", b_dtype="fp8_e5m2")
    chain = chain_of(g)
    assert [g.nodes[i].name for i in chain.nodes] == ["mm", "scale0", "scale1", "bias", "act"]
    assert chain.scales == (g.tensor_by_name("descale0").uid, g.tensor_by_name("descale1").uid)
    spec, _ = CuteMatmulBuilder().plan(g.node_by_name("mm"), g, chain)
    assert (spec.a_dtype, spec.b_dtype, spec.scale_dtypes, spec.round_s) == (
        "fp8_e4m3",
        "fp8_e5m2",
        ("float32", "float32"),
        ("float32", "float32"),
    )
    assert (spec.bias_dtype, spec.activation, spec.round_y) == ("bfloat16", "gelu", "float32")


def test_the_last_scale_may_be_the_output() -> None:
    g = fp8_graph(scales=2)
    chain = chain_of(g)
    assert [g.nodes[i].name for i in chain.nodes] == ["mm", "scale0", "scale1"]
    spec, _ = CuteMatmulBuilder().plan(g.node_by_name("mm"), g, chain)
    assert spec.round_s == ("float32", "bfloat16") and spec.bias_dtype is None


def test_a_graph_scalar_is_a_scale() -> None:
    g = fp8_graph(scales=1, pass_by_value=True)
    assert chain_of(g).scales == (g.tensor_by_name("descale0").uid,)


@pytest.mark.parametrize(
    ("kw", "names"),
    [
        ({"scales": 3}, ["mm", "scale0", "scale1"]),  # at most two scales
        ({"scale_dims": (1, N)}, None),  # a row of values is not a per-tensor scale
        ({"virtual_scale": True}, None),  # a computed scale is another step's output
    ],
)
def test_what_is_not_a_scale_stops_the_chain(kw: dict, names: list[str] | None) -> None:
    g = fp8_graph(**kw)
    chain = chain_of(g)
    assert (None if chain is None else [g.nodes[i].name for i in chain.nodes]) == names


def test_builder_serves_fp8_keys_and_declines_row_major_b() -> None:
    g = fp8_graph(scales=0)
    node = g.node_by_name("mm")
    builder = CuteMatmulBuilder()
    assert builder.serves(key_for(node, g))
    builder.check(node, g, None)
    g.tensor_by_name("b").set_stride((N, 1))
    with pytest.raises(NotSupported, match="contiguous along K"):
        builder.check(node, g, None)
