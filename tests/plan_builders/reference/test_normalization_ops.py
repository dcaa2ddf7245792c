"""batchnorm (inference, training, backward), layernorm and rmsnorm (forward, backward) nodes end to end.

Oracles: torch float64 (F.batch_norm with its running-statistics update,
F.layer_norm, F.rms_norm) and torch autograd for every backward node;
statistics outputs against torch's mean / variance. Layouts: NCHW and NHWC
storage, and normalized axes that are not the trailing ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from graph_runs import close, normal, outputs, run, torch64

import sigdnn

torch = pytest.importorskip("torch")
F = torch.nn.functional


def per_channel(rng: np.random.Generator, c: int, rank: int) -> np.ndarray:
    return rng.standard_normal((1, c, *(1,) * (rank - 2)))


@pytest.mark.parametrize(("dims", "last"), [((4, 3, 5, 6), False), ((4, 3, 5, 6), True), ((3, 2, 2, 3, 4), True)])
def test_batchnorm_training_with_running_stats(dims: tuple[int, ...], last: bool) -> None:
    rng = np.random.default_rng(sum(dims))
    c, rank = dims[1], len(dims)
    x = normal(rng, dims, last)
    scale, bias, rm, rv = (per_channel(rng, c, rank) for _ in range(4))
    rv = np.abs(rv) + 0.5
    g = sigdnn.Graph("bn", io_dtype="float64")
    layout = ("NHWC" if rank == 4 else "NDHWC") if last else None
    ts = {n: g.tensor(n, a.shape, layout=layout if n == "x" else None) for n, a in
          {"x": x, "scale": scale, "bias": bias, "rm": rm, "rv": rv}.items()}  # fmt: skip
    y, mean, inv, nrm, nrv = g.batchnorm(ts["x"], ts["scale"], ts["bias"], ts["rm"], ts["rv"], 1e-3, 0.25, name="bn")
    outputs(g, {"y": y.set_data_type("float64"), "mean": mean, "inv": inv, "nrm": nrm, "nrv": nrv})
    for t in (mean, inv, nrm, nrv):
        t.set_data_type("float64")
    got = run(g, {"x": x, "scale": scale, "bias": bias, "rm": rm, "rv": rv})
    running_mean, running_var = torch64(rm.ravel()), torch64(rv.ravel())
    want = F.batch_norm(torch64(x), running_mean, running_var, torch64(scale.ravel()), torch64(bias.ravel()),
                        training=True, momentum=0.25, eps=1e-3)  # fmt: skip
    axes = (0, *range(2, rank))
    xt = torch64(x)
    close(got["y"], want)
    close(got["mean"], xt.mean(dim=axes, keepdim=True))
    close(got["inv"], 1 / torch.sqrt(xt.var(dim=axes, unbiased=False, keepdim=True) + 1e-3))
    close(got["nrm"], running_mean.reshape(rm.shape))
    close(got["nrv"], running_var.reshape(rv.shape))


def test_batchnorm_training_without_running_stats_writes_no_running_outputs() -> None:
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 2, 3, 3))
    g = sigdnn.Graph("bn", io_dtype="float64", intermediate_dtype="float64")
    xt, s, b = g.tensor("x", x.shape), g.tensor("s", (1, 2, 1, 1)), g.tensor("b", (1, 2, 1, 1))
    y, mean, _, nrm, nrv = g.batchnorm(xt, s, b, epsilon=1e-5)
    assert nrm is None and nrv is None
    assert mean.dtype == sigdnn.DataType.FLOAT32  # statistics default to float32, as cuDNN keeps them
    outputs(g, {"y": y, "mean": mean})
    scale, bias = rng.standard_normal((1, 2, 1, 1)), rng.standard_normal((1, 2, 1, 1))
    got = run(g, {"x": x, "s": scale, "b": bias})
    want = F.batch_norm(torch64(x), None, None, torch64(scale.ravel()), torch64(bias.ravel()), training=True, eps=1e-5)
    close(got["y"], want)
    assert got["mean"].dtype == np.float32
    np.testing.assert_array_equal(got["mean"], x.mean(axis=(0, 2, 3), keepdims=True).astype(np.float32))


def test_batchnorm_inference_and_backward_match_autograd() -> None:
    """batchnorm_backward with the saved statistics is the gradient of training batchnorm (autograd)."""
    rng = np.random.default_rng(3)
    dims = (3, 4, 5, 2)
    x, dy = normal(rng, dims, True), normal(rng, dims, False)
    scale, bias = per_channel(rng, 4, 4), per_channel(rng, 4, 4)
    eps = 1e-4
    mean = x.mean(axis=(0, 2, 3), keepdims=True)
    inv = 1 / np.sqrt(x.var(axis=(0, 2, 3), keepdims=True) + eps)
    g = sigdnn.Graph("bn_bwd", io_dtype="float64")
    ts = {n: g.tensor(n, a.shape) for n, a in {"x": x, "dy": dy, "s": scale, "b": bias, "m": mean, "i": inv}.items()}
    y = g.batchnorm_inference(ts["x"], ts["m"], ts["i"], ts["s"], ts["b"], name="bn_inf")
    dx, dscale, dbias = g.batchnorm_backward(ts["dy"], ts["x"], ts["s"], ts["m"], ts["i"], name="bn_bwd")
    outputs(g, {"y": y, "dx": dx, "dscale": dscale, "dbias": dbias})
    got = run(g, {"x": x, "dy": dy, "s": scale, "b": bias, "m": mean, "i": inv})
    close(got["y"], (x - mean) * inv * scale + bias)
    xt, st, bt = torch64(x, True), torch64(scale.ravel(), True), torch64(bias.ravel(), True)
    F.batch_norm(xt, None, None, st, bt, training=True, eps=eps).backward(torch64(dy))
    close(got["dx"], xt.grad, rtol=1e-10)
    close(got["dscale"], st.grad.reshape(scale.shape), rtol=1e-10)
    close(got["dbias"], bt.grad.reshape(bias.shape))


@pytest.mark.parametrize(
    ("x_dims", "scale_dims"),
    [((2, 3, 8), (1, 1, 8)), ((2, 3, 4, 5), (1, 3, 4, 5)), ((4, 6, 3), (1, 6, 1))],  # the last: a middle axis
)
def test_layernorm_forward_and_backward(x_dims: tuple[int, ...], scale_dims: tuple[int, ...]) -> None:
    rng = np.random.default_rng(len(x_dims) + x_dims[1])
    x, dy = rng.standard_normal(x_dims), rng.standard_normal(x_dims)
    scale, bias = rng.standard_normal(scale_dims), rng.standard_normal(scale_dims)
    axes = tuple(i for i, (s, d) in enumerate(zip(scale_dims, x_dims)) if s == d)
    g = sigdnn.Graph("ln", io_dtype="float64", intermediate_dtype="float64")
    ts = {n: g.tensor(n, a.shape) for n, a in {"x": x, "dy": dy, "s": scale, "b": bias}.items()}
    y, mean, inv = g.layernorm("training", ts["x"], ts["s"], ts["b"], epsilon=1e-5, name="ln")
    y_inf, none_mean, none_inv = g.layernorm("inference", ts["x"], ts["s"], ts["b"], epsilon=1e-5, name="ln_inf")
    assert none_mean is None and none_inv is None
    for t in (mean, inv):
        t.set_data_type("float64")
    dx, dscale, dbias = g.layernorm_backward(ts["dy"], ts["x"], ts["s"], mean, inv, name="ln_bwd")
    outputs(g, {"y": y, "y_inf": y_inf, "mean": mean, "inv": inv, "dx": dx, "dscale": dscale, "dbias": dbias})
    got = run(g, {"x": x, "dy": dy, "s": scale, "b": bias})
    xt, st, bt = torch64(x, True), torch64(scale, True), torch64(bias, True)
    mu = xt.mean(dim=axes, keepdim=True)
    var = xt.var(dim=axes, unbiased=False, keepdim=True)
    want = (xt - mu) / torch.sqrt(var + 1e-5) * st + bt
    if axes == tuple(range(len(x_dims) - len(axes), len(x_dims))):  # trailing axes: torch's own layer_norm agrees
        shape = x_dims[len(x_dims) - len(axes) :]
        close(want, F.layer_norm(torch64(x), shape, torch64(scale.reshape(shape)), torch64(bias.reshape(shape)), 1e-5))
    close(got["y"], want)
    close(got["y_inf"], want)
    close(got["mean"], mu)
    close(got["inv"], 1 / torch.sqrt(var + 1e-5))
    want.backward(torch64(dy))
    close(got["dx"], xt.grad, rtol=1e-10)
    close(got["dscale"], st.grad, rtol=1e-10)
    close(got["dbias"], bt.grad)


@pytest.mark.parametrize("with_bias", [False, True])
def test_rmsnorm_forward_and_backward(with_bias: bool) -> None:
    rng = np.random.default_rng(7 + with_bias)
    x, dy = rng.standard_normal((3, 4, 16)), rng.standard_normal((3, 4, 16))
    scale, bias = rng.standard_normal((1, 1, 16)), rng.standard_normal((1, 1, 16))
    g = sigdnn.Graph("rms", io_dtype="float64", intermediate_dtype="float64")
    xt, dyt, st = g.tensor("x", x.shape), g.tensor("dy", dy.shape), g.tensor("s", scale.shape)
    bt = g.tensor("b", bias.shape) if with_bias else None
    y, inv = g.rmsnorm("training", xt, st, bt, epsilon=1e-6, name="rms")
    inv.set_data_type("float64")
    dx, dscale, dbias = g.rmsnorm_backward(dyt, xt, st, inv, has_dbias=with_bias, name="rms_bwd")
    assert (dbias is not None) == with_bias
    outputs(g, {"y": y, "inv": inv, "dx": dx, "dscale": dscale, "dbias": dbias})
    inputs = {"x": x, "dy": dy, "s": scale, **({"b": bias} if with_bias else {})}
    got = run(g, inputs)
    xw, sw, bw = torch64(x, True), torch64(scale, True), torch64(bias, True)
    want = F.rms_norm(xw, (16,), sw.reshape(16), eps=1e-6) + (bw if with_bias else 0)
    close(got["y"], want)
    close(got["inv"], torch.rsqrt((torch64(x) ** 2).mean(dim=-1, keepdim=True) + 1e-6))
    want.backward(torch64(dy))
    close(got["dx"], xw.grad, rtol=1e-10)
    close(got["dscale"], sw.grad, rtol=1e-10)
    if with_bias:
        close(got["dbias"], bw.grad)
    else:
        assert "dbias" not in got


def test_layernorm_bfloat16_io_float32_stats() -> None:
    """bf16 x and y, float32 statistics by default: y is torch's float64 result rounded once to bf16."""
    import ml_dtypes

    rng = np.random.default_rng(9)
    x = rng.standard_normal((4, 32)).astype(ml_dtypes.bfloat16)
    scale, bias = rng.standard_normal((1, 32)).astype(ml_dtypes.bfloat16), np.zeros((1, 32), ml_dtypes.bfloat16)
    g = sigdnn.Graph("ln16", io_dtype="bfloat16", compute_dtype="float32")
    y, mean, inv = g.layernorm("training", g.tensor("x", x.shape), g.tensor("s", (1, 32)), g.tensor("b", (1, 32)))
    outputs(g, {"y": y, "mean": mean, "inv": inv})
    got = sigdnn.Executor().run(g, {"x": x, "s": scale, "b": bias})
    xf = torch64(x.astype(np.float64))
    want = F.layer_norm(xf, (32,), torch64(scale.astype(np.float64).ravel()), None, 1e-5)
    np.testing.assert_array_equal(got["y"], sigdnn.dtypes.round_to(want.numpy(), sigdnn.DataType.BFLOAT16))
    assert got["mean"].dtype == np.float32 and got["inv"].dtype == np.float32
    np.testing.assert_array_equal(got["mean"], xf.mean(dim=1, keepdim=True).numpy().astype(np.float32))
