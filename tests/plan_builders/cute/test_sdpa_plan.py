"""The CuTe SDPA builder's host side, without a GPU: what it accepts, what it declines and why, the launch scalars."""

from __future__ import annotations

import math

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.sdpa import CuteSdpaBuilder
from sigdnn.plan_builders.cute.sdpa_layout import FmhaConfig, FmhaSpec, check_config, default_config, parse_config
from sigdnn.signature_keys import key_for


def attention(
    dtype: str = "bfloat16",
    q_dims: tuple[int, ...] = (2, 8, 100, 128),
    kv_dims: tuple[int, ...] = (2, 2, 70, 128),
    v_dim: int | None = None,
    *,
    scale: float = 0.125,
    causal: bool = False,
    stats: bool = True,
    bias: bool = False,
    q_strides: tuple[int, ...] | None = None,
    compute: str = "float32",
) -> sigdnn.Graph:
    g = sigdnn.Graph("attn", io_dtype=dtype, compute_dtype=compute)
    q = g.tensor("q", q_dims, q_strides)
    k = g.tensor("k", kv_dims)
    v = g.tensor("v", (*kv_dims[:3], v_dim or kv_dims[3]))
    b = g.tensor("bias", (1, 1, q_dims[2], kv_dims[2])) if bias else None
    o, st = g.sdpa(q, k, v, scale, b, causal, stats, name="sdpa")
    o.set_output(True)
    if st is not None:
        st.set_output(True)
    return g


def plan(g: sigdnn.Graph):
    return CuteSdpaBuilder().plan(g.node_by_name("sdpa"), g)


def test_grouped_query_heads_and_the_launch_scalars() -> None:
    spec, problem = plan(attention(causal=True))
    assert spec == FmhaSpec("bfloat16", 128, True, True)
    assert (problem.batch, problem.heads, problem.kv_heads, problem.groups) == (2, 8, 2, 4)
    assert (problem.sq, problem.skv) == (100, 70)
    assert problem.q_strides == (8 * 100 * 128, 100 * 128, 128)
    assert problem.k_strides == (2 * 70 * 128, 70 * 128, 128)
    assert problem.stats_strides == (800, 100, 1)
    assert problem.scale_log2 == pytest.approx(0.125 / math.log(2))


def test_bshd_strides_reach_the_kernel() -> None:
    dims = (2, 4, 64, 64)
    bshd = (64 * 4 * 64, 64, 4 * 64, 1)
    _, problem = plan(attention(q_dims=dims, kv_dims=dims, q_strides=bshd, stats=False))
    assert problem.q_strides == (bshd[0], bshd[1], bshd[2])
    assert problem.stats_strides == (0, 0, 0)


def test_a_unit_dim_gets_a_tma_friendly_stride() -> None:
    _, problem = plan(attention(q_dims=(1, 2, 1, 64), kv_dims=(1, 1, 5, 64)))
    assert problem.q_strides == (8, 64, 8)
    assert problem.k_strides == (8, 8, 64)


@pytest.mark.parametrize(
    ("graph", "reason"),
    [
        (lambda: attention(bias=True), "additive bias"),
        (lambda: attention(q_dims=(1, 2, 10, 96), kv_dims=(1, 2, 10, 96)), "head dims"),
        (lambda: attention(v_dim=64), "head dims"),
        (lambda: attention(scale=-0.5), "positive"),
        (lambda: attention(dtype="float32"), "supported: float16, bfloat16"),
        (lambda: attention(q_dims=(1, 2, 10, 64), kv_dims=(1, 2, 10, 64), q_strides=(1300, 650, 65, 1)), "16 bytes"),
        (lambda: attention(q_dims=(1, 2, 10, 64), kv_dims=(1, 2, 10, 64), q_strides=(1280, 1, 128, 2)), "contiguous"),
        (lambda: attention(compute="float16"), "compute dtype"),
        (lambda: attention(q_dims=(2, 1, 4, 64), kv_dims=(2, 1, 4, 64), q_strides=(2**40, 256, 64, 1)), "2\\^40"),
    ],
)
def test_declines_with_the_reason(graph, reason: str) -> None:
    with pytest.raises(NotSupported, match=reason):
        plan(graph())


def test_serves_keys_without_bias_only() -> None:
    builder = CuteSdpaBuilder()
    plain, biased = attention(), attention(bias=True)
    assert builder.serves(key_for(plain.node_by_name("sdpa"), plain))
    assert not builder.serves(key_for(biased.node_by_name("sdpa"), biased))


def test_config_labels_and_limits() -> None:
    assert parse_config("m128n176s2") == FmhaConfig(128, 176, 2)
    assert parse_config(FmhaConfig(128, 128, 3).label) == FmhaConfig(128, 128, 3)
    assert parse_config("m128n128s2p") == FmhaConfig(128, 128, 2, pingpong=True)
    assert FmhaConfig(128, 176, 2, pingpong=True).label == "m128n176s2p"
    assert parse_config("m128n128s2px") == FmhaConfig(128, 128, 2, pingpong=True, persistent=True)
    assert parse_config("m128n128s3x").kernel == FmhaConfig(128, 128, 3)  # persistence is a launch choice
    assert parse_config("m128n128s2pbx") == FmhaConfig(128, 128, 2, pingpong=True, persistent=True, balanced=True)
    assert FmhaConfig(128, 128, 2, balanced=True).label == "m128n128s2b"
    with pytest.raises(ValueError, match="bad SDPA config"):
        parse_config("128x128")
    spec = FmhaSpec("bfloat16", 128, False, False)
    check_config(spec, FmhaConfig(128, 128, 3))  # 224 KiB: fits
    with pytest.raises(ValueError, match="shared memory"):
        check_config(spec, FmhaConfig(128, 176, 3))
    with pytest.raises(ValueError, match="tile_m"):
        check_config(spec, FmhaConfig(64, 128, 2))
    with pytest.raises(ValueError, match="causal mask only"):
        check_config(spec, FmhaConfig(balanced=True))
    check_config(FmhaSpec("bfloat16", 128, True, False), FmhaConfig(balanced=True))


def test_one_cta_per_tile_or_per_sm() -> None:
    _, problem = plan(attention(q_dims=(2, 8, 300, 128), kv_dims=(2, 2, 70, 128)))
    tiles = 3 * 8 * 2  # ceil(300 / 128) query blocks of each of 16 (batch, head) pairs
    assert problem.ctas(FmhaConfig(), 132) == tiles
    assert problem.ctas(FmhaConfig(persistent=True), 132) == tiles
    assert problem.ctas(FmhaConfig(persistent=True), 20) == 20
    # balanced (causal) units pair query blocks p and m_blocks - 1 - p; the odd middle one is alone
    assert problem.ctas(FmhaConfig(balanced=True), 132) == 2 * 8 * 2
    assert problem.ctas(FmhaConfig(balanced=True, persistent=True), 20) == 20


def test_default_configs_follow_the_measurements() -> None:
    assert default_config(FmhaSpec("bfloat16", 128, False, True)).label == "m128n128s2x"
    assert default_config(FmhaSpec("bfloat16", 128, True, False)).label == "m128n128s2pbx"
    assert default_config(FmhaSpec("bfloat16", 128, True, True)).label == "m128n128s2"
    assert default_config(FmhaSpec("float16", 64, False, False)).label == "m128n128s2x"
    assert default_config(FmhaSpec("float16", 64, True, False)).label == "m128n128s2pbx"
