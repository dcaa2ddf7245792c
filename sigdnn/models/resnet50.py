"""ResNet-50 (v1.5, torchvision's: the stride on each bottleneck's 3x3 conv) in NHWC, inference and a training step.

Inference folds every batchnorm into its conv (a per-channel bias added to
the conv's output), as deployed models do. The training step runs
batchnorm in training mode (batch statistics) and, from the loss's gradient
with respect to the logits (given: the loss itself is the caller's), every
parameter's gradient: conv dgrad / wgrad, batchnorm backward, relu's
gradient from its output, max-pooling and global-average-pooling backward,
and the classifier's matmuls.

Sizes are parameters (``width`` the stem's channels, ``blocks`` the
bottlenecks per stage), so a test runs the same graph at toy size.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.views import view_layout

EXPANSION = 4
STAGES = (3, 4, 6, 3)
AVERAGE = "average_count_include_pad"


def _graph(name: str, dtype: str) -> Graph:
    """bf16 models keep bf16 activations (how they run in torch), float32 compute and statistics."""
    return Graph(name, io_dtype=dtype, intermediate_dtype=dtype, compute_dtype="float32")


def _conv_weight(g: Graph, name: str, k: int, c: int, r: int) -> Tensor:
    return g.tensor(name, (k, c, r, r), layout="NHWC")


def _channels(g: Graph, name: str, c: int) -> Tensor:
    return g.tensor(name, (1, c, 1, 1), dtype="float32")


def _stage_plan(width: int, blocks: Sequence[int]) -> list[tuple[str, int, int, int, bool]]:
    """(name, channels in, bottleneck width, stride, has downsample) per bottleneck."""
    plan, c_in = [], width
    for s, count in enumerate(blocks):
        mid = width * 2**s
        for b in range(count):
            stride = 2 if s > 0 and b == 0 else 1
            plan.append((f"layer{s + 1}.{b}", c_in, mid, stride, b == 0))
            c_in = mid * EXPANSION
    return plan


def resnet50(
    batch: int = 64,
    image: int = 224,
    classes: int = 1000,
    *,
    width: int = 64,
    blocks: Sequence[int] = STAGES,
    dtype: str = "bfloat16",
) -> Graph:
    """ResNet-50 inference: ``image`` [N, 3, H, W] (NHWC) -> ``logits`` [N, classes]; batchnorm folded.

    Parameters: ``conv1.w`` / ``conv1.b``, per bottleneck ``layerS.B.conv{1,2,3}.{w,b}`` and
    ``layerS.B.downsample.{w,b}`` (first of each stage), ``fc.w`` [C, classes], ``fc.b`` [1, classes].
    """
    g = _graph("resnet50", dtype)
    x = g.tensor("image", (batch, 3, image, image), layout="NHWC")

    def conv(x: Tensor, name: str, k: int, r: int, stride: int = 1, relu: bool = True) -> Tensor:
        w = _conv_weight(g, f"{name}.w", k, x.dims[1], r)
        y = g.conv_fprop(x, w, padding=(r // 2,) * 2, stride=(stride,) * 2, name=name)
        y = g.pointwise("add", y, _channels(g, f"{name}.b", k), name=f"{name}.bias")
        return g.pointwise("relu_fwd", y, name=f"{name}.relu") if relu else y

    x = conv(x, "conv1", width, 7, 2)
    x = g.pooling(x, "max", (3, 3), (2, 2), (1, 1), name="maxpool")
    for name, _, mid, stride, down in _stage_plan(width, blocks):
        h = conv(x, f"{name}.conv1", mid, 1)
        h = conv(h, f"{name}.conv2", mid, 3, stride)
        h = conv(h, f"{name}.conv3", mid * EXPANSION, 1, relu=False)
        short = conv(x, f"{name}.downsample", mid * EXPANSION, 1, stride, relu=False) if down else x
        x = g.pointwise("relu_fwd", g.pointwise("add", h, short, name=f"{name}.add"), name=f"{name}.relu")
    logits = _classifier(g, x, classes)[0]
    logits.set_output(True).set_name("logits")
    return g


def _classifier(g: Graph, x: Tensor, classes: int) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Global average pool, flatten (a view), fc -> (logits, features, fc.w, fc.b)."""
    n, c, h, w = x.dims
    pooled = g.pooling(x, AVERAGE, (h, w), name="avgpool")
    features = view_layout(g, g.reshape(pooled, (n, c), name="flatten"))
    fc_w, fc_b = g.tensor("fc.w", (c, classes)), g.tensor("fc.b", (1, classes))
    logits = g.pointwise("add", g.matmul(features, fc_w, name="fc"), fc_b, name="fc.bias")
    return logits, features, fc_w, fc_b


@attrs.define
class _Trained:
    """What a training step's backward needs of one conv + batchnorm (+ relu) unit."""

    x: Tensor  # the conv's input
    w: Tensor
    conv: Tensor  # the conv's output (batchnorm's input)
    scale: Tensor
    mean: Tensor
    inv_variance: Tensor
    out: Tensor  # batchnorm's output, or relu's when the unit has one
    name: str
    stride: int
    relu: bool


class _TrainingStep:
    """Builds the forward (recording each unit) and then the backward in reverse."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        self.gradients: dict[str, Tensor] = {}

    def unit(self, x: Tensor, name: str, k: int, r: int, stride: int = 1, relu: bool = True) -> _Trained:
        g = self.g
        w = _conv_weight(g, f"{name}.w", k, x.dims[1], r)
        c = g.conv_fprop(x, w, padding=(r // 2,) * 2, stride=(stride,) * 2, name=name)
        scale, bias = _channels(g, f"{name}.bn.scale", k), _channels(g, f"{name}.bn.bias", k)
        y, mean, inv, _, _ = g.batchnorm(c, scale, bias, epsilon=1e-5, name=f"{name}.bn")
        out = g.pointwise("relu_fwd", y, name=f"{name}.relu") if relu else y
        return _Trained(x, w, c, scale, mean, inv, out, name, stride, relu)

    def back(self, unit: _Trained, dy: Tensor, need_dx: bool = True) -> Tensor | None:
        """dx of one unit from the gradient of its output; its parameters' gradients recorded."""
        g, n = self.g, unit.name
        if unit.relu:
            dy = g.pointwise("relu_bwd", dy, unit.out, name=f"{n}.relu_bwd")
        dc, dscale, dbias = g.batchnorm_backward(dy, unit.conv, unit.scale, unit.mean, unit.inv_variance,
                                                 name=f"{n}.bn_bwd")  # fmt: skip
        r = unit.w.dims[2]
        geometry = {"padding": (r // 2,) * 2, "stride": (unit.stride,) * 2}
        self.gradients[f"{n}.w"] = g.conv_wgrad(unit.x, dc, **geometry, dims=unit.w.dims, name=f"{n}.wgrad")
        self.gradients[f"{n}.bn.scale"], self.gradients[f"{n}.bn.bias"] = dscale, dbias
        if not need_dx:
            return None
        return g.conv_dgrad(dc, unit.w, **geometry, dims=unit.x.dims, name=f"{n}.dgrad")


def resnet50_training(
    batch: int = 64,
    image: int = 224,
    classes: int = 1000,
    *,
    width: int = 64,
    blocks: Sequence[int] = STAGES,
    dtype: str = "bfloat16",
) -> Graph:
    """One ResNet-50 training step: ``image`` and ``d_logits`` (the loss's gradient) -> ``logits`` and ``d.<p>``
    for every parameter p (``conv1.w``, ``conv1.bn.scale`` / ``.bias``, ``layerS.B.conv{1,2,3}.*``,
    ``layerS.B.downsample.*``, ``fc.w``, ``fc.b``)."""
    g = _graph("resnet50_training", dtype)
    step = _TrainingStep(g)
    image_in = g.tensor("image", (batch, 3, image, image), layout="NHWC")
    stem = step.unit(image_in, "conv1", width, 7, 2)
    window = {"window": (3, 3), "stride": (2, 2), "padding": (1, 1)}
    x = g.pooling(stem.out, "max", **window, name="maxpool")
    units = []
    for name, _, mid, stride, down in _stage_plan(width, blocks):
        a = step.unit(x, f"{name}.conv1", mid, 1)
        b = step.unit(a.out, f"{name}.conv2", mid, 3, stride)
        c = step.unit(b.out, f"{name}.conv3", mid * EXPANSION, 1, relu=False)
        d = step.unit(x, f"{name}.downsample", mid * EXPANSION, 1, stride, relu=False) if down else None
        short = x if d is None else d.out
        x = g.pointwise("relu_fwd", g.pointwise("add", c.out, short, name=f"{name}.add"), name=f"{name}.relu")
        units.append((name, a, b, c, d, x))
    logits, features, fc_w, _ = _classifier(g, x, classes)
    d_logits = g.tensor("d_logits", logits.dims)
    step.gradients["fc.b"] = g.reduction(d_logits, "add", axes=0, name="fc.b_grad")
    step.gradients["fc.w"] = g.matmul(view_layout(g, g.transpose(features, (1, 0), name="features_t")), d_logits,
                                      name="fc.w_grad")  # fmt: skip
    d_features = g.matmul(d_logits, view_layout(g, g.transpose(fc_w, (1, 0), name="fc.w_t")), name="fc.dgrad")
    n, c, h, w = x.dims
    d_pooled = view_layout(g, g.reshape(d_features, (n, c, 1, 1), name="unflatten"))
    dx = g.pooling_backward(d_pooled, x, AVERAGE, (h, w), name="avgpool_bwd")
    for name, a, b, c_unit, d, out in reversed(units):
        d_pre = g.pointwise("relu_bwd", dx, out, name=f"{name}.relu_bwd")
        d_branch = step.back(b, step.back(c_unit, d_pre))
        d_main = step.back(a, d_branch)
        d_short = d_pre if d is None else step.back(d, d_pre)
        dx = g.pointwise("add", d_main, d_short, name=f"{name}.dx")
    d_stem = g.pooling_backward(dx, stem.out, "max", **window, name="maxpool_bwd")
    step.back(stem, d_stem, need_dx=False)
    logits.set_output(True).set_name("logits")
    for p, t in step.gradients.items():
        t.set_output(True).set_name(f"d.{p}")
    return g
