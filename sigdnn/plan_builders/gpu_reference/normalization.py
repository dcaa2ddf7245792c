"""GPU reference batch, layer and RMS normalization, forward and backward: two passes in float64.

One computation for all three (docs/ops.md): a mean and an inverse standard
deviation per kept index over the reduced axes (batchnorm: every axis but
the channel; layer / RMS norm: the axes where scale's dim, aligned to x's
rank from the right, equals x's). The variance is two-pass, sum((x - mean)^2)
/ M, never E[x^2] - E[x]^2. Backward, with x_hat = (x - mean) * inv and
g = dy * scale: dx = inv * (g - mean(g) - x_hat * mean(g * x_hat)) (RMS norm
without mean(g)); dscale = sum(dy * x_hat), dbias = sum(dy) over the axes
where scale is broadcast. Products are grouped as the CPU reference groups
them (a per-channel inv * scale for batchnorm), so the float64 values differ
only by summation order.
"""

from __future__ import annotations

import math
from typing import ClassVar

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.plan_builders.gpu_reference.arrays import Array
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.registry.engine_ids import IN_TREE

Stats = tuple[Array, Array | None, Array, Array]


def normalized_axes(x_shape: tuple[int, ...], scale_shape: tuple[int, ...]) -> tuple[int, ...]:
    """Layer / RMS norm: the axes where scale's dim equals x's (scale aligned to x's rank from the right)."""
    full = (1,) * (len(x_shape) - len(scale_shape)) + tuple(scale_shape)
    return tuple(i for i, (d, s) in enumerate(zip(x_shape, full, strict=True)) if s == d)


def channel_axes(rank: int) -> tuple[int, ...]:
    return (0, *range(2, rank))


def count(shape: tuple[int, ...], axes: tuple[int, ...]) -> int:
    return math.prod(shape[a] for a in axes)


def statistics(x: Array, axes: tuple[int, ...], epsilon: float, center: bool) -> Stats:
    """(x - mean or x, mean or None, variance (mean square uncentred), inverse std), kept dims."""
    m = count(x.shape, axes)
    mean = x.reduce("SUM", axes) / float(m) if center else None
    d = x - mean if mean is not None else x
    var = (d * d).reduce("SUM", axes) / float(m)
    inv = 1.0 / (var + epsilon).apply("SQRT")
    return d, mean, var, inv


def backward(
    dy: Array, x: Array, axes: tuple[int, ...], scale: Array, mean: Array | None, inv: Array, per_channel: bool
) -> tuple[Array, Array, Array]:
    """(dx, dscale, dbias) of y = x_hat * scale + bias; dscale and dbias in scale's shape."""
    m = float(count(x.shape, axes))
    h = (x - mean if mean is not None else x) * inv
    s = scale.reshape((1,) * (len(x.shape) - len(scale.shape)) + scale.shape)
    param_axes = tuple(i for i, d in enumerate(s.shape) if d == 1 and x.shape[i] != 1)
    dscale = (dy * h).reduce("SUM", param_axes).reshape(scale.shape) if param_axes else (dy * h).reshape(scale.shape)
    dbias = dy.reduce("SUM", param_axes).reshape(scale.shape) if param_axes else dy.reshape(scale.shape)
    if per_channel:  # scale factors out of the sums
        c1 = dy.reduce("SUM", axes) / m
        c2 = (dy * h).reduce("SUM", axes) / m
        dx = (dy - c1 - h * c2) * (inv * s)
    else:
        g = dy * s
        c2 = (g * h).reduce("SUM", axes) / m
        centred = g - g.reduce("SUM", axes) / m if mean is not None else g
        dx = (centred - h * c2) * inv
    return dx, dscale, dbias


class GpuReferenceBatchnormInference(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.batchnorm_inference"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("batchnorm_inference",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        return lambda i: {"y": (i["x"] - i["mean"]) * (i["inv_variance"] * i["scale"]) + i["bias"]}


class GpuReferenceBatchnorm(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.batchnorm"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("batchnorm",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        op = node.op

        def run(i: dict[str, Array | None]) -> dict[str, Array]:
            x = i["x"]
            axes = channel_axes(len(x.shape))
            d, mean, var, inv = statistics(x, axes, op.epsilon, center=True)
            out = {"y": d * (inv * i["scale"]) + i["bias"], "mean": mean, "inv_variance": inv}
            if i.get("in_running_mean") is not None and op.momentum is not None:
                m = count(x.shape, axes)
                unbiased = var * (m / (m - 1)) if m > 1 else Array.full(x.gpu, var.shape, math.nan)
                keep = 1.0 - op.momentum
                out["next_running_mean"] = i["in_running_mean"] * keep + mean * op.momentum
                out["next_running_var"] = i["in_running_var"] * keep + unbiased * op.momentum
            return out

        return run


class GpuReferenceBatchnormBackward(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.batchnorm_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("batchnorm_backward",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        def run(i: dict[str, Array | None]) -> dict[str, Array]:
            axes = channel_axes(len(i["x"].shape))
            dx, ds, db = backward(i["dy"], i["x"], axes, i["scale"], i["mean"], i["inv_variance"], True)
            return {"dx": dx, "dscale": ds, "dbias": db}

        return run


class GpuReferenceLayernorm(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.layernorm"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("layernorm",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        op = node.op

        def run(i: dict[str, Array | None]) -> dict[str, Array]:
            axes = normalized_axes(i["x"].shape, i["scale"].shape)
            d, mean, _, inv = statistics(i["x"], axes, op.epsilon, center=True)
            return {"y": d * inv * i["scale"] + i["bias"], "mean": mean, "inv_variance": inv}

        return run


class GpuReferenceLayernormBackward(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.layernorm_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("layernorm_backward",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        def run(i: dict[str, Array | None]) -> dict[str, Array]:
            axes = normalized_axes(i["x"].shape, i["scale"].shape)
            dx, ds, db = backward(i["dy"], i["x"], axes, i["scale"], i["mean"], i["inv_variance"], False)
            return {"dx": dx, "dscale": ds, "dbias": db}

        return run


class GpuReferenceRmsnorm(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.rmsnorm"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("rmsnorm",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        op = node.op

        def run(i: dict[str, Array | None]) -> dict[str, Array]:
            axes = normalized_axes(i["x"].shape, i["scale"].shape)
            d, _, _, inv = statistics(i["x"], axes, op.epsilon, center=False)
            y = d * inv * i["scale"]
            return {"y": y + i["bias"] if i.get("bias") is not None else y, "inv_variance": inv}

        return run


class GpuReferenceRmsnormBackward(GpuReferenceBuilder):
    name: ClassVar[str] = "gpu_reference.rmsnorm_backward"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("rmsnorm_backward",)

    def formula(self, node: Node, graph: Graph) -> Formula:
        def run(i: dict[str, Array | None]) -> dict[str, Array]:
            axes = normalized_axes(i["x"].shape, i["scale"].shape)
            dx, ds, db = backward(i["dy"], i["x"], axes, i["scale"], None, i["inv_variance"], False)
            return {"dx": dx, "dscale": ds, "dbias": db}

        return run
