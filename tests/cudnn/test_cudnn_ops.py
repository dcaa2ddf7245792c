"""Every pygraph op of docs/cudnn.md, written as cuDNN-frontend's samples write it, against torch in float64."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import sigdnn.cudnn as cudnn
from tests.cudnn.conftest import close, run

g64 = torch.Generator().manual_seed(0)


def rand(*dims: int) -> torch.Tensor:
    return torch.randn(*dims, dtype=torch.float64, generator=g64)


def test_conv_fprop_bias_relu(graph):
    x, w, b = rand(2, 4, 7, 7), rand(6, 4, 3, 3), rand(1, 6, 1, 1)
    X = graph.tensor(name="X", dim=x.size(), stride=x.stride(), data_type=cudnn.data_type.DOUBLE)
    W, B = graph.tensor_like(w), graph.tensor_like(b)
    Y = graph.conv_fprop(image=X, weight=W, padding=[1, 0], stride=[2, 1], dilation=[1, 2])
    Z = graph.relu(input=graph.bias(input=Y, bias=B))
    (z,) = run(graph, {X: x, W: w, B: b}, [Z])
    close(z, torch.relu(F.conv2d(x, w, stride=(2, 1), padding=(1, 0), dilation=(1, 2)) + b))


def test_conv_dgrad_and_wgrad_strided_take_set_dim(graph):
    x, w = rand(2, 3, 9, 9), rand(5, 3, 3, 3)
    dy = rand(2, 5, 4, 4)
    DY, W, X = graph.tensor_like(dy), graph.tensor_like(w), graph.tensor_like(x)
    DX = graph.conv_dgrad(loss=DY, filter=W, padding=[0, 0], stride=[2, 2], dilation=[1, 1])
    DX.set_dim(x.size()).set_stride(x.stride())
    DW = graph.conv_wgrad(image=X, loss=DY, padding=[0, 0], stride=[2, 2], dilation=[1, 1])
    DW.set_dim(w.size()).set_stride(w.stride())
    dx, dw = run(graph, {DY: dy, W: w, X: x}, [DX, DW])
    close(dx, torch.nn.grad.conv2d_input(x.shape, w, dy, stride=2))
    close(dw, torch.nn.grad.conv2d_weight(x, w.shape, dy, stride=2))


def test_matmul(graph):
    a, b = rand(3, 4, 5), rand(1, 5, 6)
    A, B = graph.tensor_like(a), graph.tensor_like(b)
    (c,) = run(graph, {A: a, B: b}, [graph.matmul(A=A, B=B)])
    close(c, a @ b)


UNARY = {
    "abs": torch.abs, "neg": torch.neg, "ceil": torch.ceil, "floor": torch.floor, "exp": torch.exp,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "erf": torch.erf, "identity": lambda t: t,
    "tanh": torch.tanh, "sigmoid": torch.sigmoid, "elu": F.elu, "gelu": F.gelu, "softplus": F.softplus,
    "gelu_approx_tanh": lambda t: F.gelu(t, approximate="tanh"), "swish": F.silu,
}  # fmt: skip


@pytest.mark.parametrize("method", sorted(UNARY))
def test_unary_pointwise(graph, method):
    x = rand(2, 3, 4)
    X = graph.tensor_like(x)
    (y,) = run(graph, {X: x}, [getattr(graph, method)(input=X)])
    close(y, UNARY[method](x))


@pytest.mark.parametrize("method", ["sqrt", "rsqrt", "reciprocal", "log"])
def test_unary_pointwise_on_positive(graph, method):
    x = rand(5, 3).abs() + 0.1
    X = graph.tensor_like(x)
    (y,) = run(graph, {X: x}, [getattr(graph, method)(input=X)])
    close(y, getattr(torch, method)(x))


BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "add_square": lambda a, b: a + b * b}
PAIR = {"max": torch.maximum, "min": torch.minimum, "pow": lambda a, b: a.abs() ** b, "mod": torch.fmod}


@pytest.mark.parametrize("method", sorted(BINARY))
def test_binary_pointwise_broadcasts(graph, method):
    a, b = rand(2, 3, 4), rand(1, 3, 1)
    A, B = graph.tensor_like(a), graph.tensor_like(b)
    (y,) = run(graph, {A: a, B: b}, [getattr(graph, method)(a=A, b=B)])
    close(y, BINARY[method](a, b))


@pytest.mark.parametrize("method", sorted(PAIR))
def test_pair_pointwise(graph, method):
    a, b = rand(4, 5), rand(4, 5)
    a = a.abs() + 0.5 if method == "pow" else a
    A, B = graph.tensor_like(a), graph.tensor_like(b)
    (y,) = run(graph, {A: a, B: b}, [getattr(graph, method)(input0=A, input1=B)])
    close(y, PAIR[method](a, b))


@pytest.mark.parametrize("method", ["cmp_eq", "cmp_neq", "cmp_gt", "cmp_ge", "cmp_lt", "cmp_le"])
def test_comparisons(graph, method):
    a = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    b = torch.tensor([[2.0, 2.0, 2.0]], dtype=torch.float64)
    A, B = graph.tensor_like(a), graph.tensor_like(b)
    (y,) = run(graph, {A: a, B: b}, [getattr(graph, method)(input=A, comparison=B)])
    ops = {"eq": torch.eq, "neq": torch.ne, "gt": torch.gt, "ge": torch.ge, "lt": torch.lt, "le": torch.le}
    close(y, ops[method.removeprefix("cmp_")](a, b))


def test_logical_and_select(graph):
    a = torch.tensor([[0.0, 1.0, 1.0, 0.0]], dtype=torch.float64)
    b = torch.tensor([[0.0, 0.0, 1.0, 1.0]], dtype=torch.float64)
    x, y = rand(1, 4), rand(1, 4)
    A, B, X, Y = (graph.tensor_like(t) for t in (a, b, x, y))
    both = graph.logical_and(a=A, b=B)
    either = graph.logical_or(a=A, b=B)
    inverted = graph.logical_not(input=A)
    chosen = graph.binary_select(input0=X, input1=Y, mask=B)
    r = run(graph, {A: a, B: b, X: x, Y: y}, [both, either, inverted, chosen])
    close(r[0], (a.bool() & b.bool()).double())
    close(r[1], (a.bool() | b.bool()).double())
    close(r[2], (~a.bool()).double())
    close(r[3], torch.where(b.bool(), x, y))


def test_relu_clips_and_leaky(graph):
    x = rand(3, 8)
    X = graph.tensor_like(x)
    clipped = graph.relu(input=X, lower_clip=-0.5, upper_clip=0.7, negative_slope=0.1)
    leaky = graph.leaky_relu(input=X, negative_slope=0.2)
    r = run(graph, {X: x}, [clipped, leaky])
    lower = torch.where(x < -0.5, -0.5 + 0.1 * (x + 0.5), x)
    close(r[0], lower.clamp(max=0.7))
    close(r[1], F.leaky_relu(x, 0.2))


BACKWARD = {"relu": torch.relu, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "gelu": F.gelu, "elu": F.elu,
            "softplus": F.softplus, "gelu_approx_tanh": lambda t: F.gelu(t, approximate="tanh"),
            "swish": F.silu}  # fmt: skip


@pytest.mark.parametrize("activation", sorted(BACKWARD))
def test_activation_backward(graph, activation):
    x, dy = rand(3, 5), rand(3, 5)
    X, DY = graph.tensor_like(x), graph.tensor_like(dy)
    (dx,) = run(graph, {X: x, DY: dy}, [getattr(graph, f"{activation}_backward")(loss=DY, input=X)])
    leaf = x.clone().requires_grad_(True)
    BACKWARD[activation](leaf).backward(dy)
    close(dx, leaf.grad)


def test_gen_index_and_scale(graph):
    x, s = rand(2, 3), torch.full((1, 1), 2.5, dtype=torch.float64)
    X, S = graph.tensor_like(x), graph.tensor_like(s)
    index = graph.gen_index(input=X, axis=1)
    index.set_data_type(cudnn.data_type.INT32)
    scaled = graph.scale(input=X, scale=S)
    out = run(graph, {X: x, S: s}, [scaled])
    close(out[0], x * 2.5)
    assert index.get_data_type() is cudnn.data_type.INT32


def test_gen_index(graph):
    x = rand(2, 3)
    X = graph.tensor_like(x)
    (index,) = run(graph, {X: x}, [graph.gen_index(input=X, axis=1)])
    close(index, torch.arange(3, dtype=torch.float64).expand(2, 3))


def test_batchnorm_training_and_inference(graph):
    x, scale, bias = rand(4, 3, 5, 5), rand(1, 3, 1, 1), rand(1, 3, 1, 1)
    rm, rv = rand(1, 3, 1, 1), rand(1, 3, 1, 1).abs()
    X, SC, BI, RM, RV = (graph.tensor_like(t) for t in (x, scale, bias, rm, rv))
    eps = graph.tensor_like(torch.full((1, 1, 1, 1), 1e-3, dtype=torch.float64))
    momentum = graph.tensor_like(torch.full((1, 1, 1, 1), 0.25, dtype=torch.float64))
    Y, MEAN, INV, NRM, NRV = graph.batchnorm(input=X, scale=SC, bias=BI, in_running_mean=RM, in_running_var=RV,
                                             epsilon=eps, momentum=momentum)  # fmt: skip
    for t in (MEAN, INV):
        t.set_data_type(cudnn.data_type.DOUBLE)
    y, mean, inv, nrm, nrv = run(graph, {X: x, SC: scale, BI: bias, RM: rm, RV: rv}, [Y, MEAN, INV, NRM, NRV])
    rm_t, rv_t = rm.reshape(-1).clone(), rv.reshape(-1).clone()
    expect = F.batch_norm(x, rm_t, rv_t, scale.reshape(-1), bias.reshape(-1), training=True, momentum=0.25, eps=1e-3)
    close(y, expect)
    close(mean, x.mean(dim=(0, 2, 3), keepdim=True))
    close(inv, 1 / torch.sqrt(x.var(dim=(0, 2, 3), unbiased=False, keepdim=True) + 1e-3))
    close(nrm, rm_t.reshape(1, 3, 1, 1))
    close(nrv, rv_t.reshape(1, 3, 1, 1))


def test_batchnorm_inference_and_backward(graph):
    x, dy, scale, bias = rand(2, 3, 4, 4), rand(2, 3, 4, 4), rand(1, 3, 1, 1), rand(1, 3, 1, 1)
    mean = x.mean(dim=(0, 2, 3), keepdim=True)
    inv = 1 / torch.sqrt(x.var(dim=(0, 2, 3), unbiased=False, keepdim=True) + 1e-5)
    X, DY, SC, BI, M, IV = (graph.tensor_like(t) for t in (x, dy, scale, bias, mean, inv))
    Y = graph.batchnorm_inference(input=X, mean=M, inv_variance=IV, scale=SC, bias=BI)
    DX, DS, DB = graph.batchnorm_backward(grad=DY, input=X, scale=SC, mean=M, inv_variance=IV)
    y, dx, ds, db = run(graph, {X: x, DY: dy, SC: scale, BI: bias, M: mean, IV: inv}, [Y, DX, DS, DB])
    close(y, (x - mean) * inv * scale + bias)
    leaf, s_leaf, b_leaf = (t.clone().requires_grad_(True) for t in (x, scale.reshape(-1), bias.reshape(-1)))
    F.batch_norm(leaf, None, None, s_leaf, b_leaf, training=True, eps=1e-5).backward(dy)
    close(dx, leaf.grad)
    close(ds.reshape(-1), s_leaf.grad)
    close(db.reshape(-1), b_leaf.grad)


def test_layernorm_forward_and_backward(graph):
    x, scale, bias, dy = rand(4, 6, 1, 1), rand(1, 6, 1, 1), rand(1, 6, 1, 1), rand(4, 6, 1, 1)
    X, SC, BI, DY = (graph.tensor_like(t) for t in (x, scale, bias, dy))
    Y, MEAN, INV = graph.layernorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=X, scale=SC,
                                   bias=BI, epsilon=1e-5)  # fmt: skip
    (
        MEAN.set_data_type(cudnn.data_type.DOUBLE),
        INV.set_data_type(cudnn.data_type.DOUBLE),
    )  # statistics: float32 unless set
    DX, DS, DB = graph.layernorm_backward(grad=DY, input=X, scale=SC, mean=MEAN, inv_variance=INV)
    y, dx, ds, db = run(graph, {X: x, SC: scale, BI: bias, DY: dy}, [Y, DX, DS, DB])
    leaf, s_leaf, b_leaf = (
        t.clone().requires_grad_(True) for t in (x.reshape(4, 6), scale.reshape(6), bias.reshape(6))
    )
    out = F.layer_norm(leaf, (6,), s_leaf, b_leaf, eps=1e-5)
    out.backward(dy.reshape(4, 6))
    close(y.reshape(4, 6), out.detach())
    close(dx.reshape(4, 6), leaf.grad)
    close(ds.reshape(6), s_leaf.grad)
    close(db.reshape(6), b_leaf.grad)


def test_layernorm_inference_returns_no_statistics(graph):
    x, scale, bias = rand(3, 5), rand(1, 5), rand(1, 5)
    X, SC, BI = (graph.tensor_like(t) for t in (x, scale, bias))
    Y, mean, inv = graph.layernorm(cudnn.norm_forward_phase.INFERENCE, X, SC, BI, 1e-5)
    assert mean is None and inv is None
    (y,) = run(graph, {X: x, SC: scale, BI: bias}, [Y])
    close(y, F.layer_norm(x, (5,), scale.reshape(5), bias.reshape(5), eps=1e-5))


def test_rmsnorm_forward_and_backward(graph):
    x, scale, dy = rand(3, 8), rand(1, 8), rand(3, 8)
    X, SC, DY = (graph.tensor_like(t) for t in (x, scale, dy))
    Y, INV = graph.rmsnorm(norm_forward_phase=cudnn.norm_forward_phase.TRAINING, input=X, scale=SC, epsilon=1e-6)
    INV.set_data_type(cudnn.data_type.DOUBLE)
    DX, DS, DB = graph.rmsnorm_backward(grad=DY, input=X, scale=SC, inv_variance=INV, has_dbias=False)
    assert DB is None
    y, dx, ds = run(graph, {X: x, SC: scale, DY: dy}, [Y, DX, DS])
    leaf, s_leaf = x.clone().requires_grad_(True), scale.clone().requires_grad_(True)
    out = leaf * torch.rsqrt(leaf.pow(2).mean(-1, keepdim=True) + 1e-6) * s_leaf
    out.backward(dy)
    close(y, out.detach())
    close(dx, leaf.grad)
    close(ds, s_leaf.grad)


def test_softmax_with_stats(graph):
    x = rand(2, 3, 7)
    X = graph.tensor_like(x)
    Y, STATS = graph.softmax(input=X, generate_stats=True)
    y, stats = run(graph, {X: x}, [Y, STATS.set_data_type(cudnn.data_type.DOUBLE)])
    close(y, torch.softmax(x, -1))
    close(stats, torch.logsumexp(x, -1, keepdim=True))


@pytest.mark.parametrize("mode", ["ADD", "MAX", "MIN", "AMAX", "AVG", "NORM2", "MUL"])
def test_reduction_takes_output_dims(graph, mode):
    x = rand(3, 4, 5)
    X = graph.tensor_like(x)
    Y = graph.reduction(input=X, mode=getattr(cudnn.reduction_mode, mode))
    Y.set_dim([3, 1, 5]).set_stride([5, 5, 1])
    (y,) = run(graph, {X: x}, [Y])
    expect = {"ADD": x.sum(1), "MAX": x.amax(1), "MIN": x.amin(1), "AMAX": x.abs().amax(1), "AVG": x.mean(1),
              "NORM2": x.norm(dim=1), "MUL": x.prod(1)}[mode]  # fmt: skip
    close(y, expect.unsqueeze(1))


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_forward_and_backward(graph, causal):
    b, h, s, d = 2, 2, 5, 4
    q, k, v, do = rand(b, h, s, d), rand(b, h, s, d), rand(b, h, s, d), rand(b, h, s, d)
    scale = 1 / math.sqrt(d)
    Q, K, V, DO = (graph.tensor_like(t) for t in (q, k, v, do))
    O_, STATS = graph.sdpa(q=Q, k=K, v=V, attn_scale=scale, use_causal_mask=causal, generate_stats=True)
    STATS.set_data_type(cudnn.data_type.DOUBLE)
    DQ, DK, DV = graph.sdpa_backward(q=Q, k=K, v=V, o=O_, dO=DO, stats=STATS, attn_scale=scale,
                                     use_causal_mask=causal)  # fmt: skip
    o, dq, dk, dv = run(graph, {Q: q, K: k, V: v, DO: do}, [O_, DQ, DK, DV])
    leaves = [t.clone().requires_grad_(True) for t in (q, k, v)]
    expect = F.scaled_dot_product_attention(*leaves, is_causal=causal, scale=scale)
    expect.backward(do)
    close(o, expect.detach())
    for got, leaf in zip((dq, dk, dv), leaves):
        close(got, leaf.grad)


def test_sdpa_is_inference_gives_no_stats(graph):
    q = rand(1, 1, 3, 4)
    Q, K, V = (graph.tensor_like(q.clone()) for _ in range(3))
    O_, stats = graph.sdpa(q=Q, k=K, v=V, is_inference=True)
    assert stats is None
    (o,) = run(graph, {Q: q, K: q, V: q}, [O_])
    close(o, F.scaled_dot_product_attention(q, q, q, scale=1.0))


def test_relu_backward_with_its_parameters_and_leaky_relu_backward(graph):
    x, dy = rand(4, 6), rand(4, 6)
    X, DY = graph.tensor_like(x), graph.tensor_like(dy)
    leaky = graph.leaky_relu_backward(loss=DY, input=X, negative_slope=0.2)
    clipped = graph.relu_backward(loss=DY, input=X, upper_clip=0.5)
    got_leaky, got_clipped = run(graph, {X: x, DY: dy}, [leaky, clipped])
    close(got_leaky, torch.where(x > 0, dy, 0.2 * dy))
    close(got_clipped, torch.where((x > 0) & (x < 0.5), dy, torch.zeros_like(dy)))
