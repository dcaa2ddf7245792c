"""conv_dgrad / conv_wgrad nodes end to end against torch autograd in float64.

torch has no asymmetric padding, so x is padded explicitly before its
convolution; autograd then gives dx (cropped back) and dw for any padding,
stride, dilation and group count. Layouts: logical NCHW values stored
channels-last as well as packed.
"""

from __future__ import annotations

import numpy as np
import pytest
from graph_runs import close, normal, outputs, run, torch64

import sigdnn

torch = pytest.importorskip("torch")

CASES = [
    # x dims, w dims, pre, post, stride, dilation, channels_last
    ((2, 4, 7, 6), (6, 4, 3, 3), (1, 1), (1, 1), (1, 1), (1, 1), False),
    ((2, 4, 7, 6), (6, 2, 3, 2), (2, 0), (0, 1), (2, 1), (1, 2), True),  # 2 groups, asymmetric padding
    ((1, 3, 9), (3, 1, 4), (1,), (2,), (3,), (2,), False),  # depthwise 1-D, stride > kernel span
    ((1, 2, 4, 5, 3), (4, 2, 2, 3, 1), (0, 1, 0), (1, 1, 0), (1, 2, 1), (1, 1, 1), True),  # 3-D
    ((3, 5, 8, 8), (7, 5, 1, 1), (0, 0), (0, 0), (2, 2), (1, 1), True),  # 1x1, strided: odd rows unread
]


def torch_grads(x, w, dy, pre, post, stride, dilation):
    """(dx, dw, y's dims) of y = conv(pad(x), w) for incoming dy, by autograd (dx is x's: the pad is in the graph)."""
    f = {1: torch.nn.functional.conv1d, 2: torch.nn.functional.conv2d, 3: torch.nn.functional.conv3d}[x.ndim - 2]
    xt, wt = torch64(x, grad=True), torch64(w, grad=True)
    pads = [p for a, b in zip(reversed(pre), reversed(post)) for p in (a, b)]
    y = f(torch.nn.functional.pad(xt, pads), wt, stride=stride, dilation=dilation, groups=x.shape[1] // w.shape[1])
    y.backward(torch64(dy))
    return xt.grad, wt.grad, tuple(y.shape)


@pytest.mark.parametrize("case", CASES, ids=[f"{len(c[0]) - 2}d-{i}" for i, c in enumerate(CASES)])
def test_dgrad_and_wgrad_match_autograd(case: tuple) -> None:
    x_dims, w_dims, pre, post, stride, dilation, last = case
    rng = np.random.default_rng(len(x_dims) * 7 + w_dims[0])
    x, w = normal(rng, x_dims, last), normal(rng, w_dims, last)
    f_pads = dict(pre_padding=pre, post_padding=post, stride=stride, dilation=dilation)
    g = sigdnn.Graph("conv_grads", io_dtype="float64", compute_dtype="float64")
    layout = {3: "NWC", 4: "NHWC", 5: "NDHWC"}[len(x_dims)] if last else None
    xt, wt = g.tensor("x", x_dims, layout=layout), g.tensor("w", w_dims, layout=layout)
    y_dims = g.conv_fprop(xt, wt, **f_pads, name="shape_probe").dims
    dyt = g.tensor("dy", y_dims, layout=layout)
    dx = g.conv_dgrad(dyt, wt, **f_pads, dims=x_dims, name="dgrad")
    dw = g.conv_wgrad(xt, dyt, **f_pads, dims=w_dims, name="wgrad")
    outputs(g, {"dx": dx, "dw": dw})
    dy = normal(rng, y_dims, last)
    got = run(g, {"x": x, "w": w, "dy": dy})
    want_dx, want_dw, torch_y = torch_grads(x, w, dy, pre, post, stride, dilation)
    assert torch_y == y_dims
    close(got["dx"], want_dx, rtol=1e-11)
    close(got["dw"], want_dw, rtol=1e-11)


def test_inferred_dims_stride_one_ungrouped() -> None:
    """Without dims, stride 1 and no groups: dx is x's dims and dw is w's, and the values are the gradients."""
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 3, 6, 5)), rng.standard_normal((4, 3, 3, 2))
    g = sigdnn.Graph("inferred", io_dtype="float64")
    xt, wt = g.tensor("x", x.shape), g.tensor("w", w.shape)
    dyt = g.tensor("dy", (2, 4, 6, 6))
    dx = g.conv_dgrad(dyt, wt, pre_padding=(1, 0), post_padding=(1, 2), name="dgrad")
    dw = g.conv_wgrad(xt, dyt, pre_padding=(1, 0), post_padding=(1, 2), name="wgrad")
    assert dx.dims == x.shape and dw.dims == w.shape
    outputs(g, {"dx": dx, "dw": dw})
    dy = rng.standard_normal((2, 4, 6, 6))
    got = run(g, {"x": x, "w": w, "dy": dy})
    want_dx, want_dw, _ = torch_grads(x, w, dy, (1, 0), (1, 2), (1, 1), (1, 1))
    close(got["dx"], want_dx)
    close(got["dw"], want_dw)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_low_precision_rounds_once(dtype: str) -> None:
    """f16 / bf16 / f32 tensors, float64 compute: each output is torch's float64 gradient rounded once."""
    import ml_dtypes

    np_dtype = {"float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float32": np.float32}[dtype]
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 4, 5, 5)).astype(np_dtype)
    w = rng.standard_normal((4, 4, 3, 3)).astype(np_dtype)
    dy = rng.standard_normal((2, 4, 3, 3)).astype(np_dtype)
    g = sigdnn.Graph("low", io_dtype=dtype, compute_dtype="float32")
    xt, wt, dyt = g.tensor("x", x.shape), g.tensor("w", w.shape), g.tensor("dy", dy.shape)
    outputs(g, {"dx": g.conv_dgrad(dyt, wt, name="dgrad"), "dw": g.conv_wgrad(xt, dyt, name="wgrad")})
    got = sigdnn.Executor().run(g, {"x": x, "w": w, "dy": dy})
    want_dx, want_dw, _ = torch_grads(*(a.astype(np.float64) for a in (x, w, dy)), (0, 0), (0, 0), (1, 1), (1, 1))
    for name, want in (("dx", want_dx), ("dw", want_dw)):
        assert got[name].dtype == np_dtype
        np.testing.assert_array_equal(got[name], sigdnn.dtypes.round_to(want.numpy(), sigdnn.DataType(dtype)))


HUGE = 2**62  # a stride or dilation no window ever takes a second step of


def test_a_step_no_window_takes_is_never_multiplied_out() -> None:
    """A stride along an axis of one output and a dilation along an axis of one tap are never applied (the fuzzer's
    case 19,710,794: byte strides of 56 x 2^62 overflowed the reference's window view); fprop, dgrad and wgrad
    equal torch's with those set to 1, which the op's definition makes the same convolution."""
    rng = np.random.default_rng(62)
    x, w = normal(rng, (2, 3, 2, 6), True), normal(rng, (4, 3, 2, 1), True)  # out rows: (2 - 2) // s + 1 = 1
    kw = dict(pre_padding=(0, 0), post_padding=(0, 0), stride=(HUGE, 2), dilation=(1, HUGE))
    g = sigdnn.Graph("unused_steps", io_dtype="float64", compute_dtype="float64")
    xt, wt = g.tensor("x", x.shape, layout="NHWC"), g.tensor("w", w.shape, layout="NHWC")
    y = g.conv_fprop(xt, wt, **kw, name="fprop")
    dyt = g.tensor("dy", y.dims, layout="NHWC")
    dx = g.conv_dgrad(dyt, wt, **kw, dims=x.shape, name="dgrad")
    dw = g.conv_wgrad(xt, dyt, **kw, dims=w.shape, name="wgrad")
    outputs(g, {"y": y, "dx": dx, "dw": dw})
    dy = normal(rng, y.dims, True)
    got = run(g, {"x": x, "w": w, "dy": dy})
    want_dx, want_dw, dims = torch_grads(x, w, dy, (0, 0), (0, 0), (1, 2), (1, 1))
    assert dims == y.dims == (2, 4, 1, 3)
    close(got["y"], torch.nn.functional.conv2d(torch64(x), torch64(w), stride=(1, 2)), rtol=1e-11)
    close(got["dx"], want_dx, rtol=1e-11)
    close(got["dw"], want_dw, rtol=1e-11)
