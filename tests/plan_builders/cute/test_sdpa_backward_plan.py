"""The CuTe SDPA backward builder's host side, without a GPU: what it accepts, what it declines and why."""

from __future__ import annotations

import math

import pytest

import sigdnn
from sigdnn.errors import NotSupported
from sigdnn.plan_builders.cute.sdpa_backward import CuteSdpaBackwardBuilder
from sigdnn.plan_builders.cute.sdpa_backward_layout import BwdSpec
from sigdnn.signature_keys import key_for


def backward(
    dtype: str = "bfloat16",
    q_dims: tuple[int, ...] = (2, 8, 100, 128),
    kv_dims: tuple[int, ...] = (2, 2, 70, 128),
    v_dim: int | None = None,
    *,
    scale: float = 0.125,
    causal: bool = False,
    bias: bool = False,
    q_strides: tuple[int, ...] | None = None,
    o_strides: tuple[int, ...] | None = None,
    stats_dtype: str = "float32",
    grad_dtype: str | None = None,
    compute: str = "float32",
) -> sigdnn.Graph:
    g = sigdnn.Graph("attn_bwd", io_dtype=dtype, compute_dtype=compute)
    dv = v_dim or kv_dims[3]
    q = g.tensor("q", q_dims, q_strides)
    k = g.tensor("k", kv_dims)
    v = g.tensor("v", (*kv_dims[:3], dv))
    o = g.tensor("o", (*q_dims[:3], dv), o_strides)
    d_o = g.tensor("d_o", (*q_dims[:3], dv))
    stats = g.tensor("stats", (*q_dims[:3], 1), dtype=stats_dtype)
    b = g.tensor("bias", (1, 1, q_dims[2], kv_dims[2])) if bias else None
    for t in g.sdpa_backward(q, k, v, o, d_o, stats, scale, b, causal, name="sdpa_backward"):
        t.set_output(True)
        if grad_dtype:
            t.set_data_type(grad_dtype)
    return g


def plan(g: sigdnn.Graph):
    return CuteSdpaBackwardBuilder().plan(g.node_by_name("sdpa_backward"), g)


def test_grouped_query_heads_and_the_launch_scalars() -> None:
    spec, problem = plan(backward(causal=True))
    assert spec == BwdSpec("bfloat16", 128, True)
    assert (problem.batch, problem.heads, problem.kv_heads, problem.groups) == (2, 8, 2, 4)
    assert (problem.sq, problem.skv, problem.sq_pad) == (100, 70, 128)
    assert problem.q_strides == problem.dq_strides == (8 * 100 * 128, 100 * 128, 128)
    assert problem.k_strides == problem.dk_strides == (2 * 70 * 128, 70 * 128, 128)
    assert problem.stats_strides == (800, 100, 1)
    assert problem.scale_log2 == pytest.approx(0.125 / math.log(2))
    # the float32 dq accumulator of every padded row, then the base-2 stats and D of each row
    assert problem.workspace_bytes == 2 * 8 * 128 * (128 + 2) * 4


def test_the_gradients_take_any_strides_with_the_head_dim_contiguous() -> None:
    """dq, dk and dv are written element by element: odd row strides are fine."""
    g = backward(q_dims=(1, 2, 10, 64), kv_dims=(1, 2, 10, 64))
    op = g.node_by_name("sdpa_backward").op
    for uid in (op.dq, op.dk, op.dv):
        g.tensors[uid].set_stride((1300, 650, 65, 1))
    _, problem = plan(g)
    assert problem.dq_strides == problem.dk_strides == problem.dv_strides == (8, 650, 65)  # batch 1: never stepped


@pytest.mark.parametrize(
    ("graph", "reason"),
    [
        (lambda: backward(bias=True), "additive bias"),
        (lambda: backward(q_dims=(1, 2, 10, 96), kv_dims=(1, 2, 10, 96)), "head dims"),
        (lambda: backward(v_dim=64), "head dims"),
        (lambda: backward(scale=-0.5), "positive"),
        (lambda: backward(dtype="float32"), "supported: float16, bfloat16"),
        (lambda: backward(grad_dtype="float32"), "share q's dtype"),
        (lambda: backward(stats_dtype="bfloat16"), "stats is bfloat16"),
        (lambda: backward(q_dims=(1, 2, 10, 64), kv_dims=(1, 2, 10, 64), q_strides=(1300, 650, 65, 1)), "16 bytes"),
        (lambda: backward(q_dims=(1, 2, 10, 64), kv_dims=(1, 2, 10, 64), o_strides=(1300, 650, 65, 1)), "o strides"),
        (lambda: backward(q_dims=(1, 2, 10, 64), kv_dims=(1, 2, 10, 64), q_strides=(1280, 1, 128, 2)), "contiguous"),
        (lambda: backward(compute="float16"), "compute dtype"),
        (lambda: backward(q_dims=(2, 1, 4, 64), kv_dims=(2, 1, 4, 64), q_strides=(2**40, 256, 64, 1)), "2\\^40"),
    ],
)
def test_declines_with_the_reason(graph, reason: str) -> None:
    with pytest.raises(NotSupported, match=reason):
        plan(graph())


def test_serves_keys_without_bias_only() -> None:
    builder = CuteSdpaBackwardBuilder()
    plain, biased = backward(), backward(bias=True)
    assert builder.serves(key_for(plain.node_by_name("sdpa_backward"), plain))
    assert not builder.serves(key_for(biased.node_by_name("sdpa_backward"), biased))


def test_the_builder_is_registered_under_its_engine_id() -> None:
    registry = sigdnn.registry.Registry(entry_point_group=None)
    assert registry.find("cute.sdpa_backward").engine_id == 3011
