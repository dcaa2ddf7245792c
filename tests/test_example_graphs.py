"""The reference op set's example graphs compute what their frameworks compute (torch float64 oracles).

Each committed .sdg is read back and run; the oracle recomputes the block
in float64 torch (autograd for the backward graphs), and the bound is the
graph's own precision: float32 intermediates, one rounding to the output
dtype. The ResNet backward must also fit in half its intermediates' memory.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import sigdnn
from sigdnn.validation import random_inputs

torch = pytest.importorskip("torch")
F = torch.nn.functional
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load(name: str) -> tuple[sigdnn.Graph, dict[str, np.ndarray], dict[str, np.ndarray]]:
    graph = sigdnn.deserialize((EXAMPLES / f"{name}.sdg").read_bytes())
    inputs = random_inputs(graph, seed=1)
    return graph, inputs, sigdnn.Executor().run(graph, inputs)


def t(a: np.ndarray, grad: bool = False) -> torch.Tensor:
    return torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad)


def near(got: np.ndarray | torch.Tensor, want: torch.Tensor, rtol: float) -> None:
    """Within rtol of the largest magnitude of ``want`` (errors of float32 chains are absolute-ish)."""
    g = got.detach().numpy() if isinstance(got, torch.Tensor) else np.asarray(got, dtype=np.float64)
    w = want.detach().numpy()
    np.testing.assert_allclose(g, w, rtol=0, atol=rtol * float(np.abs(w).max()))


def test_resnet_block_forward_and_backward() -> None:
    g, inputs, out = load("resnet_block")
    x, w1, w2 = t(inputs["x"], True), t(inputs["w1"], True), t(inputs["w2"], True)
    params = {n: t(inputs[n].ravel(), True) for n in ("scale1", "bias1", "scale2", "bias2")}
    a1 = F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), None, None, params["scale1"], params["bias1"], True))
    n2 = F.batch_norm(F.conv2d(a1, w2, padding=1), None, None, params["scale2"], params["bias2"], True)
    y = F.relu(n2 + x)
    y.backward(t(inputs["dy"]))
    near(out["y"], y, 2e-6)  # float32 chains: observed ~1e-7
    near(out["dx"], x.grad, 2e-6)
    near(out["dw1"], w1.grad, 2e-6)
    near(out["dw2"], w2.grad, 2e-6)
    for i in (1, 2):
        near(out[f"dscale{i}"].ravel(), params[f"scale{i}"].grad, 2e-6)
        near(out[f"dbias{i}"].ravel(), params[f"bias{i}"].grad, 2e-6)
    memory = sigdnn.Executor().prepare(g).memory
    assert memory.peak_bytes <= memory.total_bytes / 2


def test_transformer_block_forward() -> None:
    _, inputs, out = load("transformer_block")
    p = {n: t(a.astype(np.float64)) for n, a in inputs.items()}
    b, s, e = p["x"].shape
    heads = 4
    h = F.layer_norm(p["x"], (e,), p["ln_scale"].reshape(e), p["ln_bias"].reshape(e), 1e-5)
    q, k, v = (h @ p["w_qkv"]).split(e, dim=-1)
    q, k, v = (z.reshape(b, s, heads, e // heads).transpose(1, 2) for z in (q, k, v))
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=(e // heads) ** -0.5)
    h1 = o.transpose(1, 2).reshape(b, s, e) @ p["w_out"] + p["x"]
    n = F.rms_norm(h1, (e,), p["rms_scale"].reshape(e), 1e-6)
    y = F.gelu(n @ p["w_up"] + p["b_up"]) @ p["w_down"] + h1
    assert out["y"].dtype == sigdnn.DataType.BFLOAT16.numpy
    near(out["y"], y, 2**-8 * 1.05)  # half a bfloat16 ulp (2^-8 relative at most) on top of float32 errors


def test_bn_relu_backward() -> None:
    graph = sigdnn.deserialize((EXAMPLES / "bn_relu_backward.sdg").read_bytes())
    inputs = random_inputs(graph, seed=1)
    x = inputs["x"].astype(np.float64)
    mean = x.mean(axis=(0, 2, 3), keepdims=True)  # saved statistics consistent with x, as training leaves them
    inv = 1 / np.sqrt(x.var(axis=(0, 2, 3), keepdims=True) + 1e-5)
    inputs = {**inputs, "mean": mean.astype(np.float32), "inv_variance": inv.astype(np.float32)}
    got = sigdnn.Executor().run(graph, inputs)
    xt = t(x, True)
    scale, bias = t(inputs["scale"].ravel(), True), t(inputs["bias"].ravel(), True)
    m, i = t(inputs["mean"]), t(inputs["inv_variance"])
    y = (xt - m) * i * scale.reshape(1, -1, 1, 1) + bias.reshape(1, -1, 1, 1)  # batchnorm with the saved stats
    dz = t(inputs["dy"]) * (y > 0)
    m_count = x.size // x.shape[1]
    x_hat = (xt - m) * i
    dbias = dz.sum(dim=(0, 2, 3))
    dscale = (dz * x_hat).sum(dim=(0, 2, 3))
    dx = (
        scale.reshape(1, -1, 1, 1)
        * i
        / m_count
        * (m_count * dz - dbias.reshape(1, -1, 1, 1) - x_hat * dscale.reshape(1, -1, 1, 1))
    )
    # the closed form equals autograd of training batchnorm when the saved statistics are x's own
    train = F.batch_norm(xt, None, None, scale, bias, training=True, eps=1e-5)
    (grad_x,) = torch.autograd.grad(train, xt, dz)
    near(dx, grad_x, 1e-6)
    near(got["dx"], dx, 2**-11 * 1.1)  # half a float16 ulp, relative
    near(got["dscale"].ravel(), dscale, 1e-6)
    near(got["dbias"].ravel(), dbias, 1e-6)
