"""Models built with PyTorch on the CPU and exported to ONNX in memory, for the importer's tests and benchmark.

torchvision is not a dependency: ResNet-18 is written out here (He et al.,
2015, the torchvision layer layout), with random weights and random batchnorm
statistics so that every layer matters.
"""

from __future__ import annotations

import io
import warnings

import torch
from torch import nn


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.down is None else self.down(x)))


class ResNet18(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)
        )
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


def resnet18(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = ResNet18()
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
            m.weight.data.uniform_(0.5, 1.5)
            m.bias.data.uniform_(-0.2, 0.2)
    return model.eval()


def encoder(seed: int = 0, d_model: int = 32, heads: int = 4, ff: int = 64) -> nn.Module:
    """A 2-layer transformer encoder: attention + layernorm + MLP (gelu) per layer."""
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.0, batch_first=True, activation="gelu")
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False).eval()


def export(model: nn.Module, x: torch.Tensor, *, fold_constants: bool = True, opset: int = 17) -> bytes:
    """ONNX bytes of ``model`` at input ``x`` (TorchScript exporter: needs only the onnx package)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model,
            (x,),
            buffer,
            dynamo=False,
            opset_version=opset,
            input_names=["x"],
            output_names=["y"],
            do_constant_folding=fold_constants,
        )
    return buffer.getvalue()


class InvertedResidual(nn.Module):
    """MobileNetV3's block (Howard et al., 2019; torchvision's layout): expand, depthwise, squeeze-excite, project."""

    def __init__(self, cin: int, mid: int, cout: int, stride: int, hard: bool) -> None:
        super().__init__()
        act = nn.Hardswish if hard else nn.ReLU
        self.expand = nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), act())
        self.depthwise = nn.Sequential(
            nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False), nn.BatchNorm2d(mid), act()
        )
        squeeze = max(8, mid // 4)
        self.se = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Conv2d(mid, squeeze, 1), nn.ReLU(), nn.Conv2d(squeeze, mid, 1), nn.Hardsigmoid()
        )
        self.project = nn.Sequential(nn.Conv2d(mid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(self.expand(x))
        y = self.project(y * self.se(y))
        return x + y if self.residual else y


def mobilenet_v3_small_like(seed: int = 0, classes: int = 100) -> nn.Module:
    """mobilenet_v3_small's stem, four of its blocks and its head (Hardswish, Hardsigmoid in squeeze-excite)."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1, bias=False),
        nn.BatchNorm2d(16),
        nn.Hardswish(),
        InvertedResidual(16, 16, 16, 2, hard=False),
        InvertedResidual(16, 72, 24, 2, hard=False),
        InvertedResidual(24, 96, 40, 2, hard=True),
        InvertedResidual(40, 240, 40, 1, hard=True),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(40, 128),
        nn.Hardswish(),
        nn.Linear(128, classes),
    )
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.2, 0.2)
            m.running_var.uniform_(0.5, 1.5)
    return model.eval()


class CausalSelfAttention(nn.Module):
    """One causal attention block as decoders write it: the mask is torch.triu of -inf above the diagonal, which
    torch.onnx.export writes as ConstantOfShape -> Trilu when the sequence length is dynamic."""

    def __init__(self, d_model: int = 16, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.qkv, self.out, self.scale = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model), d_model**0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        length = x.shape[1]
        q, k, v = self.qkv(x).chunk(3, -1)
        mask = torch.triu(torch.full((length, length), float("-inf")), diagonal=1)
        return self.out(torch.softmax(q @ k.transpose(-1, -2) / self.scale + mask, -1) @ v)


def export_dynamic(model: nn.Module, x: torch.Tensor, axes: dict[int, str], opset: int = 17) -> bytes:
    """ONNX bytes of ``model`` with the dims ``axes`` of its input symbolic (as exported models usually have)."""
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model.eval(), (x,), buffer, dynamo=False, opset_version=opset, input_names=["x"], output_names=["y"],
            dynamic_axes={"x": axes},
        )  # fmt: skip
    return buffer.getvalue()


class VisionTransformer(nn.Module):
    """ViT-B/16's layout (Dosovitskiy et al., 2020; torchvision's vit_b_16): 16x16 patches by a strided conv, a class
    token, learned positions, pre-norm encoder layers (attention + gelu MLP), a layernorm and a linear head."""

    def __init__(self, d: int, layers: int, heads: int, ff: int, image: int = 224, patch: int = 16) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, d, patch, patch)
        self.cls = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, (image // patch) ** 2 + 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(d, heads, ff, 0.0, "gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm, self.head = nn.LayerNorm(d), nn.Linear(d, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(x).flatten(2).transpose(1, 2)
        tokens = torch.cat([self.cls.expand(x.shape[0], -1, -1), tokens], 1) + self.pos
        return self.head(self.norm(self.encoder(tokens))[:, 0])


def vit_b_16_like(seed: int = 0, d: int = 768, layers: int = 12, heads: int = 12, ff: int = 3072) -> nn.Module:
    """A ViT of vit_b_16's sizes (86 M weights) with every layer's weights drawn apart (TransformerEncoder copies one
    layer, and the exporter would store identical copies once)."""
    torch.manual_seed(seed)
    model = VisionTransformer(d, layers, heads, ff)
    with torch.no_grad():
        for p in model.encoder.parameters():
            p.copy_(torch.randn_like(p) * (0.02 if p.dim() > 1 else 0.1))
    return model.eval()


class _Segmenter(nn.Module):
    """A small FCN: a strided conv trunk, a shifted-window roll (torch.roll by 0 and by 1, as Swin exports
    them), a 1x1 classifier, and a bilinear upsampling back to the input size (as torchvision's heads)."""

    def __init__(self, classes: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(
            nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU(),
        )  # fmt: skip
        self.classify = nn.Conv2d(16, classes, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.roll(torch.roll(self.trunk(x), 0, dims=2), 1, dims=3)
        logits = self.classify(y)
        return nn.functional.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)


def segmenter(seed: int = 0, classes: int = 5) -> nn.Module:
    torch.manual_seed(seed)
    return _Segmenter(classes).eval()
