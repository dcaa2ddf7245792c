"""The frontend's op methods turn cuDNN-style arguments into the node's attributes and ports as documented.

Oracles: the documented defaults (attn_scale None is unscaled as in cuDNN,
no causal mask unless asked, stride of a pooling window = the window, ...)
read back from the node the method adds, and the dims of its outputs worked
out by hand.
"""

from __future__ import annotations

import pytest

import sigdnn
from sigdnn import GraphError


def graph() -> sigdnn.Graph:
    return sigdnn.Graph("front", io_dtype="float32", compute_dtype="float32")


def last_op(g: sigdnn.Graph) -> object:
    return g.nodes[-1].op


# -- arguments ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "given", [{"pre_padding": (1, 1)}, {"post_padding": (1, 1)}, {"pre_padding": (1, 1), "post_padding": (0, 0)}]
)
def test_padding_and_pre_or_post_padding_together_are_refused(given: dict) -> None:
    g = graph()
    x, w = g.tensor("x", (1, 2, 5, 5)), g.tensor("w", (3, 2, 3, 3))
    with pytest.raises(GraphError, match="give padding or pre_padding/post_padding, not both"):
        g.conv_fprop(x, w, padding=(1, 1), **given)


def test_pre_and_post_padding_may_differ() -> None:
    g = graph()
    y = g.conv_fprop(g.tensor("x", (1, 2, 5, 5)), g.tensor("w", (3, 2, 3, 3)), pre_padding=(1, 0), post_padding=(0, 2))
    op = last_op(g)
    assert (op.pre_padding, op.post_padding, op.stride, op.dilation) == ((1, 0), (0, 2), (1, 1), (1, 1))
    assert y.dims == (1, 3, 4, 5)  # 5 + 1 - 3 + 1 = 4 rows, 5 + 2 - 3 + 1 = 5 columns


@pytest.mark.parametrize(
    ("slices", "why"),
    [
        ([1], r"axis 0: 1 is not a slice"),
        ([slice(0, 2), "all"], r"axis 1: 'all' is not a slice"),
        ([slice(0, 2, 0)], r"axis 0: bad slice slice\(0, 2, 0\): slice step cannot be zero"),
        ([slice("a", 2)], r"axis 0: bad slice slice\('a', 2, None\)"),
    ],
)
def test_slices_that_are_no_python_slices_are_graph_errors(slices: list, why: str) -> None:
    g = graph()
    with pytest.raises(GraphError, match=why):
        g.slice(g.tensor("x", (4, 3)), slices)


# -- convolution ----------------------------------------------------------------------------------------------


def test_conv_methods_return_their_output_with_the_documented_dims() -> None:
    g = graph()
    x, w = g.tensor("x", (2, 4, 6, 6)), g.tensor("w", (8, 4, 3, 3))
    y = g.conv_fprop(x, w, padding=(1, 1))
    assert y.dims == (2, 8, 6, 6)
    dy = g.tensor("dy", (2, 8, 6, 6))
    assert g.conv_dgrad(dy, w, padding=(1, 1)).dims == (2, 4, 6, 6)
    assert g.conv_wgrad(x, dy, padding=(1, 1)).dims == (8, 4, 3, 3)
    strided = g.conv_wgrad(x, g.tensor("dy2", (2, 8, 3, 3)), padding=(1, 1), stride=(2, 2), dims=(8, 4, 3, 3))
    assert strided.dims == (8, 4, 3, 3)


@pytest.mark.parametrize("method", ["conv_fprop", "conv_dgrad", "conv_wgrad"])
def test_a_convolution_without_spatial_dims_is_refused_for_its_rank(method: str) -> None:
    """[N, C] operands have no spatial dim: the op says so, not some padding-length complaint."""
    g = graph()
    a, b = g.tensor("a", (4, 3)), g.tensor("b", (4, 3))
    with pytest.raises(GraphError, match=r"has rank 2 \(0 spatial dims\); 1 to 3 spatial dims are supported"):
        getattr(g, method)(a, b)


# -- attention --------------------------------------------------------------------------------------------------


def attention(g: sigdnn.Graph) -> tuple:
    return tuple(g.tensor(n, (1, 2, 4, 8)) for n in ("q", "k", "v"))


def test_sdpa_defaults_are_unscaled_and_unmasked_as_in_cudnn() -> None:
    g = graph()
    o, stats = g.sdpa(*attention(g))
    op = last_op(g)
    assert (op.attn_scale, op.use_causal_mask, op.generate_stats) == (1.0, False, False)
    assert o.dims == (1, 2, 4, 8) and stats is None
    g.sdpa(*attention_named(g, "2"), attn_scale=0.125, use_causal_mask=True)
    assert (last_op(g).attn_scale, last_op(g).use_causal_mask) == (0.125, True)


def attention_named(g: sigdnn.Graph, suffix: str) -> tuple:
    return tuple(g.tensor(n + suffix, (1, 2, 4, 8)) for n in ("q", "k", "v"))


def backward_inputs(g: sigdnn.Graph) -> dict:
    q, k, v = attention(g)
    return {
        "q": q,
        "k": k,
        "v": v,
        "o": g.tensor("o", (1, 2, 4, 8)),
        "d_o": g.tensor("d_o", (1, 2, 4, 8)),
        "stats": g.tensor("stats", (1, 2, 4, 1)),
    }


def test_sdpa_backward_defaults_and_outputs() -> None:
    g = graph()
    dq, dk, dv = g.sdpa_backward(**backward_inputs(g))
    op = last_op(g)
    assert (op.attn_scale, op.use_causal_mask) == (1.0, False)
    assert dq.dims == dk.dims == dv.dims == (1, 2, 4, 8)


def test_sdpa_backward_takes_the_variable_length_ports() -> None:
    g = graph()
    lengths_q, lengths_kv = g.tensor("sq", (1,), dtype="int32"), g.tensor("skv", (1,), dtype="int32")
    g.sdpa_backward(**backward_inputs(g), use_causal_mask=True, seq_len_q=lengths_q, seq_len_kv=lengths_kv)
    op = last_op(g)
    assert (op.seq_len_q, op.seq_len_kv, op.use_causal_mask) == (lengths_q.uid, lengths_kv.uid, True)


# -- normalization ----------------------------------------------------------------------------------------------


def test_norm_epsilons_default_to_torchs() -> None:
    import torch

    g = graph()
    x = g.tensor("x", (2, 3, 4))
    g.batchnorm(x, g.tensor("s", (1, 3, 1)), g.tensor("b", (1, 3, 1)))
    assert last_op(g).epsilon == torch.nn.BatchNorm1d(3).eps
    g.layernorm("training", x, g.tensor("ls", (1, 1, 4)), g.tensor("lb", (1, 1, 4)))
    assert last_op(g).epsilon == torch.nn.LayerNorm(4).eps
    g.rmsnorm("inference", x, g.tensor("rs", (1, 1, 4)))
    assert last_op(g).epsilon == 1e-5  # torch's RMSNorm takes its dtype's machine epsilon; sigdnn keeps 1e-5


def test_norm_backward_methods_return_their_gradients() -> None:
    g = graph()
    dy, x = g.tensor("dy", (2, 3, 4)), g.tensor("x", (2, 3, 4))
    per_channel = [g.tensor(n, (1, 3, 1)) for n in ("scale", "mean", "inv_variance")]
    dx, dscale, dbias = g.batchnorm_backward(dy, x, *per_channel)
    assert (dx.dims, dscale.dims, dbias.dims) == ((2, 3, 4), (1, 3, 1), (1, 3, 1))
    scale, inv_variance = g.tensor("rscale", (1, 1, 4)), g.tensor("rinv", (2, 3, 1))
    dx, dscale, dbias = g.rmsnorm_backward(dy, x, scale, inv_variance)
    assert (dx.dims, dscale.dims, dbias) == ((2, 3, 4), (1, 1, 4), None)
    dx, dscale, dbias = g.rmsnorm_backward(dy, x, scale, inv_variance, has_dbias=True)
    assert dbias.dims == (1, 1, 4)


# -- windows ----------------------------------------------------------------------------------------------------


def test_pooling_backward_defaults_to_no_padding_and_the_window_as_stride() -> None:
    g = graph()
    x, dy = g.tensor("x", (1, 2, 6, 4)), g.tensor("dy", (1, 2, 3, 2))
    dx = g.pooling_backward(dy, x, "max", (2, 2))
    op = last_op(g)
    assert (op.window, op.stride, op.pre_padding, op.post_padding) == ((2, 2), (2, 2), (0, 0), (0, 0))
    assert dx.dims == (1, 2, 6, 4)
    g.pooling(g.tensor("x1", (1, 2, 9)), "max", (3,))
    assert (last_op(g).stride, last_op(g).pre_padding) == ((3,), (0,))


@pytest.mark.parametrize("backward", [False, True])
def test_pooling_without_spatial_dims_is_refused_for_its_rank(backward: bool) -> None:
    g = graph()
    x = g.tensor("x", (4, 3))
    with pytest.raises(GraphError, match=r"has rank 2 \(0 spatial dims\); 1 to 3 spatial dims are supported"):
        if backward:
            g.pooling_backward(g.tensor("dy", (4, 3)), x, "max", (2,))
        else:
            g.pooling(x, "max", (2,))


def test_resample_needs_dims_or_scales() -> None:
    g = graph()
    with pytest.raises(GraphError, match="give y's dims or the scales"):
        g.resample(g.tensor("x", (1, 2, 4, 4)), "nearest")
    assert g.resample(g.tensor("x2", (1, 2, 4, 4)), "nearest", scales=(2.0, 0.5)).dims == (1, 2, 8, 2)


@pytest.mark.parametrize("scale", [float("inf"), float("nan")])
def test_resample_scales_must_be_finite(scale: float) -> None:
    g = graph()
    with pytest.raises(GraphError, match=f"scales must be finite, got {scale}"):
        g.resample(g.tensor("x", (1, 2, 4, 4)), "nearest", dims=(1, 2, 8, 8), scales=(scale, 2.0))
    with pytest.raises(GraphError, match=f"scales must be finite, got {scale}"):
        g.resample_backward(g.tensor("dy", (1, 2, 8, 8)), "nearest", dims=(1, 2, 4, 4), scales=(scale, 2.0))


# -- linear attention ---------------------------------------------------------------------------------------------

T, H, K, V, N = 10, 2, 4, 3, 2


def delta_rule_inputs(g: sigdnn.Graph, kind: str) -> tuple:
    dims = {"q": (T, H, K), "k": (T, H, K), "v": (T, H, V), "g": (T, H, K) if kind.startswith("kda") else (T, H)}
    named = [g.tensor(n, d) for n, d in dims.items()]
    return (*named, g.tensor("beta", (T, H)), g.tensor("cu", (N + 1,), dtype="int32"))


@pytest.mark.parametrize("kind", ["gdn", "kda", "gdn_bwd", "kda_bwd"])
def test_delta_rule_defaults_leave_the_options_off(kind: str) -> None:
    g = graph()
    extra = (None, g.tensor("d_o", (T, H, V))) if kind.endswith("_bwd") else ()
    outputs = getattr(g, kind)(*delta_rule_inputs(g, kind), *extra)
    op = last_op(g)
    assert op.use_qk_l2norm is False and op.scale is None  # None: 1 / sqrt(K) when run
    if not kind.endswith("_bwd"):
        assert op.output_final_state is False and outputs[1] is None


@pytest.mark.parametrize("kind", ["gdn", "kda", "gdn_bwd", "kda_bwd"])
@pytest.mark.parametrize("scale", ["abc", "0.5", True, [0.5], b"1"])
def test_a_delta_rule_scale_must_be_a_number(kind: str, scale: object) -> None:
    """Regression: float() turned "0.5" and True into scales and let "abc" and [0.5] escape as ValueError and
    TypeError; the scale is now read as every other frontend's number is."""
    g = graph()
    extra = (None, g.tensor("d_o", (T, H, V))) if kind.endswith("_bwd") else ()
    with pytest.raises(GraphError, match=f"node '{kind}' scale must be a number"):
        getattr(g, kind)(*delta_rule_inputs(g, kind), *extra, scale=scale)


def test_a_whole_number_scale_is_a_float() -> None:
    g = graph()
    g.gdn(*delta_rule_inputs(g, "gdn"), scale=1)
    assert last_op(g).scale == 1.0 and type(last_op(g).scale) is float


# -- pointwise conveniences -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "mode"),
    [
        ("relu", "relu_fwd"),
        ("tanh", "tanh_fwd"),
        ("sigmoid", "sigmoid_fwd"),
        ("gelu", "gelu_fwd"),
        ("elu", "elu_fwd"),
        ("swish", "swish_fwd"),
        ("softplus", "softplus_fwd"),
        ("relu_fwd", "relu_fwd"),
        ("exp", "exp"),
    ],
)
def test_activation_shorthands_name_their_forward_mode(method: str, mode: str) -> None:
    g = graph()
    y = getattr(g, method)(g.tensor("x", (2, 3)))
    assert last_op(g).mode == mode and y.dims == (2, 3)


def test_an_unknown_shorthand_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="relu_backward"):
        graph().relu_backward  # noqa: B018


def test_pointwise_parameters_are_typed_and_unknown_ones_refused() -> None:
    g = graph()
    x = g.tensor("x", (2, 3))
    g.pointwise("relu_fwd", x, relu_lower_clip=1, relu_upper_clip=None)
    op = last_op(g)
    assert op.relu_lower_clip == 1.0 and type(op.relu_lower_clip) is float and op.relu_upper_clip is None
    g.pointwise("gen_index", x, axis=1)
    assert last_op(g).axis == 1 and type(last_op(g).axis) is int
    with pytest.raises(GraphError, match="axis"):
        g.pointwise("gen_index", x, axis=1.5)
    with pytest.raises(GraphError, match="relu_lower_clip must be a number"):
        g.pointwise("relu_fwd", x, relu_lower_clip="low")
    with pytest.raises(GraphError, match=r"pointwise\[relu_fwd\]: unknown parameter\(s\) \['slope'\]"):
        g.pointwise("relu_fwd", x, slope=0.1)


def test_a_three_input_pointwise_fills_its_ports_in_order() -> None:
    g = graph()
    a, b, mask = g.tensor("a", (2, 3)), g.tensor("b", (2, 3)), g.tensor("mask", (2, 3), dtype="bool")
    g.pointwise("binary_select", a, b, mask)
    op = last_op(g)
    assert (op.in_0, op.in_1, op.in_2) == (a.uid, b.uid, mask.uid)


def test_softmax_defaults_to_the_last_axis_without_log_or_stats() -> None:
    g = graph()
    y, stats = g.softmax(g.tensor("x", (2, 3, 4)))
    op = last_op(g)
    assert (op.axes, op.log, op.generate_stats, stats) == ((2,), False, False, None)
    assert y.dims == (2, 3, 4)


def test_concatenate_counts_a_negative_axis_from_the_end() -> None:
    g = graph()
    y = g.concatenate([g.tensor("a", (2, 3)), g.tensor("b", (2, 5))], axis=-1)
    assert last_op(g).axis == 1 and y.dims == (2, 8)


@pytest.mark.parametrize(
    ("dims", "axes"),
    [((1, 1, 3), (0,)), ((4, 1, 1), (2,)), ((1, 1, 1), (0, 2)), ((4, 1, 3), ())],
)
def test_reduction_axes_are_those_the_output_makes_1_where_x_is_not(dims: tuple, axes: tuple) -> None:
    """x [4, 1, 3]: its axis 1 is 1 already, so no output dims reduce it (and x's own dims reduce nothing)."""
    g = graph()
    x = g.tensor("x", (4, 1, 3))
    assert g.reduction(x, "add", dims).dims == dims
    assert last_op(g).axes == axes
