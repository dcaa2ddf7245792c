"""GPU reference normalization (gpu_reference/normalization.py) where its formulas' details show: a layer / RMS
norm scale of lower rank than x (aligned to x from the right, so only its axes are normalized, whatever x's
leading extents), and batchnorm backward's per-channel grouping of inv * scale, which the CPU reference shares.
Oracles: NumPy float64 by the definition (docs/ops.md), rounded once, and the CPU reference."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_reference_emulation import agreement_ulps, make_available, run_both

import sigdnn
from sigdnn.accuracy.inputs import random_inputs


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_a_rank_1_scale_normalizes_the_last_axis_only(monkeypatch: pytest.MonkeyPatch, kind: str) -> None:
    make_available(monkeypatch)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 2, 4)).astype(np.float32)  # leading extents of 2: a padded 2 would match them
    scale, bias = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    g = sigdnn.Graph(kind, io_dtype="float32", compute_dtype="float32")
    ports = (g.tensor("x", x.shape), g.tensor("s", (4,)), g.tensor("b", (4,)))
    outs = getattr(g, kind)("training", *ports, epsilon=1e-3, name="n")
    for t in outs:
        if t is not None:
            t.set_output(True)
    got, cpu = run_both(g, {"x": x, "s": scale, "b": bias})
    x64 = x.astype(np.float64)
    mean = x64.mean(axis=-1, keepdims=True) if kind == "layernorm" else 0.0
    inv = 1.0 / np.sqrt(((x64 - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-3)
    y = (x64 - mean) * inv * scale + bias
    assert got["n::inv_variance"].shape == (2, 2, 1)
    np.testing.assert_allclose(got["n::inv_variance"], inv.astype(np.float32), rtol=2**-23)
    np.testing.assert_allclose(got["n::y"], y.astype(np.float32), rtol=2**-22, atol=2**-24)
    if kind == "layernorm":
        np.testing.assert_allclose(got["n::mean"], mean.astype(np.float32), rtol=2**-23, atol=2**-30)
    for name in got:
        np.testing.assert_allclose(got[name], cpu[name], rtol=2**-23, atol=2**-30)


@pytest.mark.parametrize("kind", ["layernorm_backward", "rmsnorm_backward"])
def test_a_rank_1_scale_backward_sums_its_gradients_over_every_leading_axis(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """dscale = sum(dy * x_hat) and dbias = sum(dy) over the (2, 2) leading positions, in scale's shape (4,)."""
    make_available(monkeypatch)
    g = sigdnn.Graph(kind, io_dtype="float32", compute_dtype="float32")
    x, dy, scale = g.tensor("x", (2, 2, 4)), g.tensor("dy", (2, 2, 4)), g.tensor("s", (4,))
    inv = g.tensor("inv_variance", (2, 2, 1))
    if kind == "layernorm_backward":
        outs = g.layernorm_backward(dy, x, scale, g.tensor("mean", (2, 2, 1)), inv, name="n")
    else:
        outs = g.rmsnorm_backward(dy, x, scale, inv, has_dbias=True, name="n")
    for t in outs:
        t.set_output(True)
    inputs = random_inputs(g, 1)
    got, cpu = run_both(g, inputs)
    mean = inputs["mean"].astype(np.float64) if "mean" in inputs else 0.0
    x_hat = (inputs["x"].astype(np.float64) - mean) * inputs["inv_variance"]
    dy64 = inputs["dy"].astype(np.float64)
    assert got["n::dscale"].shape == got["n::dbias"].shape == (4,)
    np.testing.assert_allclose(got["n::dscale"], (dy64 * x_hat).sum(axis=(0, 1)), rtol=2**-20)
    np.testing.assert_allclose(got["n::dbias"], dy64.sum(axis=(0, 1)), rtol=2**-20)
    for name in got:
        assert agreement_ulps(got[name], cpu[name]).max() <= 1, name


@pytest.mark.parametrize("seed", range(4))
def test_batchnorm_backward_groups_as_the_cpu_reference_bit_for_bit(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """float64 in and out, two samples per channel: every sum has two terms, so no summation order can differ,
    and dx, dscale, dbias equal the CPU reference's to the last bit (grouping dy * scale first would not)."""
    make_available(monkeypatch)
    g = sigdnn.Graph("bn", io_dtype="float64", compute_dtype="float64")
    param = {n: g.tensor(n, (1, 3)) for n in ("scale", "mean", "inv_variance")}
    outs = g.batchnorm_backward(g.tensor("dy", (2, 3)), g.tensor("x", (2, 3)), *param.values(), name="bn")
    for t in outs:
        t.set_output(True)
    got, cpu = run_both(g, random_inputs(g, seed))
    for name in ("bn::dx", "bn::dscale", "bn::dbias"):
        np.testing.assert_array_equal(got[name], cpu[name])


@pytest.mark.parametrize("n", [1, 2, 3])
def test_batchnorm_running_variance_is_unbiased_from_two_samples_on(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """next_running_var = (1 - momentum) running_var + momentum var m / (m - 1) for m = n samples per channel
    >= 2, NaN for one sample; next_running_mean likewise from the batch mean."""
    make_available(monkeypatch)
    g = sigdnn.Graph("bn", io_dtype="float32", compute_dtype="float32")
    param = {p: g.tensor(p, (1, 2)) for p in ("scale", "bias", "running_mean", "running_var")}
    outs = g.batchnorm(g.tensor("x", (n, 2)), *param.values(), epsilon=1e-5, momentum=0.25, name="bn")
    for t in outs:
        t.set_output(True)
    x = np.array([[1.0, -2.0], [3.0, 0.5], [-0.5, 4.0]], np.float32)[:n]
    inputs = {"x": x, "scale": np.ones((1, 2), np.float32), "bias": np.zeros((1, 2), np.float32),
              "running_mean": np.array([[0.5, -1.0]], np.float32), "running_var": np.array([[2.0, 0.25]], np.float32)}  # fmt: skip
    got, cpu = run_both(g, inputs)
    x64 = x.astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        unbiased = x64.var(axis=0, keepdims=True) * n / (n - 1) if n > 1 else np.full((1, 2), np.nan)
    want_var = (0.75 * inputs["running_var"] + 0.25 * unbiased).astype(np.float32)
    want_mean = (0.75 * inputs["running_mean"] + 0.25 * x64.mean(axis=0, keepdims=True)).astype(np.float32)
    np.testing.assert_allclose(got["bn::next_running_var"], want_var, rtol=2**-23)
    np.testing.assert_allclose(got["bn::next_running_mean"], want_mean, rtol=2**-23)
    for name in ("bn::next_running_var", "bn::next_running_mean"):
        np.testing.assert_array_equal(got[name], cpu[name])
