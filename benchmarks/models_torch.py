"""The models of sigdnn.models written with torch's functional ops, on the same named inputs (benchmarks/models.py).

Each function takes ``torch`` and the dict of inputs by graph name (device
tensors laid out as the graph declares: NHWC images and filters are
channels-last) and returns the graph's outputs by name; the training ones
return every parameter's gradient from autograd (``d.<name>``).
"""

from __future__ import annotations

import math
from typing import Any

ACTIVATIONS = ("image", "d_logits", "x", "dy", "cls_token")  # not parameters
CONSTANT = ("image", "d_logits", "dy", "cls_token")  # no gradient taken


def _inference(torch: Any) -> Any:
    """inference_mode eagerly; no_grad under torch.compile, whose tracing of inference_mode fails (pytorch#169477)."""
    return torch.no_grad() if torch.compiler.is_compiling() else torch.inference_mode()


def parameter_like(torch: Any, tensor: Any, dtype: str, grad: bool, device: str = "cuda") -> Any:
    """A tensor with the graph tensor's dims and strides: weights scaled by 1/sqrt(fan-in), norms' scales near 1."""
    a = torch.randn(tensor.dims, dtype=torch.float32, device=device)
    name = tensor.name
    if name.endswith(".w") or name.startswith("w"):
        a /= math.sqrt(math.prod(tensor.dims[1:]) if len(tensor.dims) == 4 else tensor.dims[0])
    elif name.endswith(".scale"):
        a = 1 + 0.1 * a
    elif name.endswith((".b", ".bias")):
        a *= 0.1
    out = torch.empty_strided(tensor.dims, tensor.strides, dtype=getattr(torch, dtype), device=device).copy_(a)
    return out.requires_grad_(grad and name not in CONSTANT)


def _resnet(torch: Any, p: dict[str, Any], unit: Any) -> Any:
    F = torch.nn.functional
    x = F.max_pool2d(unit(p["image"], "conv1", 2, True), 3, 2, 1)
    s = 1
    while f"layer{s}.0.conv1.w" in p:
        b = 0
        while f"layer{s}.{b}.conv1.w" in p:
            name, stride = f"layer{s}.{b}", (2 if s > 1 and b == 0 else 1)
            h = unit(unit(unit(x, f"{name}.conv1", 1, True), f"{name}.conv2", stride, True), f"{name}.conv3", 1, False)
            short = unit(x, f"{name}.downsample", stride, False) if b == 0 else x
            x = F.relu(h + short)
            b += 1
        s += 1
    return x.mean(dim=(2, 3)) @ p["fc.w"] + p["fc.b"]


def resnet50(torch: Any, p: dict[str, Any]) -> dict[str, Any]:
    def unit(x: Any, name: str, stride: int, relu: bool) -> Any:
        w = p[f"{name}.w"]
        y = torch.nn.functional.conv2d(x, w, p[f"{name}.b"].reshape(-1).to(x.dtype), stride, w.shape[-1] // 2)
        return torch.relu(y) if relu else y

    with _inference(torch):
        return {"logits": _resnet(torch, p, unit)}


def resnet50_training(torch: Any, p: dict[str, Any]) -> dict[str, Any]:
    def unit(x: Any, name: str, stride: int, relu: bool) -> Any:
        w = p[f"{name}.w"]
        y = torch.nn.functional.conv2d(x, w, None, stride, w.shape[-1] // 2)
        scale, bias = p[f"{name}.bn.scale"].reshape(-1), p[f"{name}.bn.bias"].reshape(-1)
        y = torch.nn.functional.batch_norm(y, None, None, scale, bias, True, eps=1e-5)
        return torch.relu(y) if relu else y

    logits = _resnet(torch, p, unit)
    names = [n for n in p if n not in ACTIVATIONS]
    grads = torch.autograd.grad(logits, [p[n] for n in names], p["d_logits"])
    return {"logits": logits, **{f"d.{n}": g for n, g in zip(names, grads)}}


def _llama(torch: Any, p: dict[str, Any], heads: int) -> Any:
    F = torch.nn.functional
    x = p["x"]
    b, s, dim = x.shape
    d = dim // heads
    kv_heads = p["wk"].shape[1] // d
    h = F.rms_norm(x, (dim,), p["attn_norm.scale"].reshape(dim), 1e-5)
    q = (h @ p["wq"]).view(b, s, heads, d).transpose(1, 2)
    k = (h @ p["wk"]).view(b, s, kv_heads, d).transpose(1, 2)
    v = (h @ p["wv"]).view(b, s, kv_heads, d).transpose(1, 2)
    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=kv_heads != heads)
    h1 = x + o.transpose(1, 2).reshape(b, s, dim) @ p["wo"]
    n2 = F.rms_norm(h1, (dim,), p["mlp_norm.scale"].reshape(dim), 1e-5)
    return h1 + (F.silu(n2 @ p["w_gate"]) * (n2 @ p["w_up"])) @ p["w_down"]


def llama_layer(torch: Any, p: dict[str, Any], heads: int) -> dict[str, Any]:
    with _inference(torch):
        return {"y": _llama(torch, p, heads)}


def llama_layer_backward(torch: Any, p: dict[str, Any], heads: int) -> dict[str, Any]:
    y = _llama(torch, p, heads)
    names = [n for n in p if n not in ACTIVATIONS]
    grads = torch.autograd.grad(y, [p["x"], *(p[n] for n in names)], p["dy"])
    return {"y": y, "dx": grads[0], **{f"d.{n}": g for n, g in zip(names, grads[1:])}}


def vit(torch: Any, p: dict[str, Any], heads: int) -> dict[str, Any]:
    F = torch.nn.functional
    patch = p["patch.w"].shape[-1]
    with _inference(torch):
        x = F.conv2d(p["image"], p["patch.w"], p["patch.b"].reshape(-1), patch).flatten(2).transpose(1, 2)
        h = torch.cat([p["cls_token"], x], 1) + p["pos_embed"]
        n, t, c = h.shape

        def ln(z: Any, name: str) -> Any:
            return F.layer_norm(z, (c,), p[f"{name}.scale"].reshape(c), p[f"{name}.bias"].reshape(c), 1e-6)

        def linear(z: Any, name: str) -> Any:
            return z @ p[f"{name}.w"] + p[f"{name}.b"]

        layer = 0
        while f"blocks.{layer}.ln1.scale" in p:
            name = f"blocks.{layer}"
            qkv = linear(ln(h, f"{name}.ln1"), f"{name}.attn.qkv").view(n, t, 3, heads, c // heads)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)
            o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, t, c)
            h = h + linear(o, f"{name}.attn.proj")
            h = h + linear(F.gelu(linear(ln(h, f"{name}.ln2"), f"{name}.fc1")), f"{name}.fc2")
            layer += 1
        return {"logits": ln(h, "ln")[:, 0] @ p["head.w"] + p["head.b"]}
