"""The float64 oracle the batchnorm training forward experiments judge their kernels by (torch only, any device)."""

from __future__ import annotations

import torch


def float64_batchnorm(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    """(mean, biased variance, inv_variance, y) of (rows, C) x per channel, in float64."""
    xd = x.double()
    mu = xd.mean(0)
    var = ((xd - mu) ** 2).mean(0)
    inv = 1.0 / torch.sqrt(var + eps)
    return mu, var, inv, (xd - mu) * inv * scale.double() + bias.double()


def bf16_ulps(got: torch.Tensor, want: torch.Tensor, bias: torch.Tensor) -> float:
    """The largest |got - want| in bf16 ulps of y, or of the bias where y cancels against it (float32 keeps no
    more there)."""
    ulp = torch.ldexp(torch.ones_like(want), torch.frexp(torch.maximum(want.abs(), bias.double().abs())).exponent - 8)
    return ((got.double() - want).abs() / ulp).max().item()
