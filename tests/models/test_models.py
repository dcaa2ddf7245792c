"""The model graphs compute what the same models compute in torch float64 (forward outputs and every gradient).

Each model runs at toy size in float32 on the reference; the oracle is the
model written again here with torch's functional ops, in float64, its
gradients from autograd. Weights are drawn with He-style scaling so
activations stay O(1) through the depth. The bound is float32's: the errors
of float32 intermediates through a few dozen layers, relative to each
result's largest magnitude.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sigdnn
from sigdnn.models import llama_layer, resnet50, resnet50_training, vit

torch = pytest.importorskip("torch")
F = torch.nn.functional


def inputs_for(graph: sigdnn.Graph, seed: int) -> dict[str, np.ndarray]:
    """Normal values; a weight (a name ending in .w, or a Llama projection) scaled by 1/sqrt(its fan-in)."""
    rng = np.random.default_rng(seed)
    out = {}
    for t in graph.inputs:
        a = rng.standard_normal(t.dims)
        if t.name.endswith(".w") or t.name.startswith("w"):
            a /= math.sqrt(math.prod(t.dims[1:]) if t.rank == 4 else t.dims[0])
        elif t.name.endswith(".scale"):
            a = 1 + 0.1 * a
        elif t.name.endswith((".b", ".bias")):
            a *= 0.1
        out[t.name] = a.astype(graph.dtype_of(t).numpy)
    return out


def tensors(inputs: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {n: torch.tensor(a.astype(np.float64), requires_grad=True) for n, a in inputs.items()}


def near(got: np.ndarray, want: torch.Tensor, rtol: float = 2e-5) -> None:
    w = want.detach().numpy()
    assert got.shape == w.shape
    np.testing.assert_allclose(np.asarray(got, np.float64), w, rtol=0, atol=rtol * float(np.abs(w).max()))


def channels(p: torch.Tensor) -> torch.Tensor:
    return p.reshape(-1)


# -- ResNet-50 ------------------------------------------------------------------
SMALL = {"width": 4, "blocks": (2, 1, 1, 1), "dtype": "float32"}


def resnet_units(p: dict[str, torch.Tensor], blocks: tuple[int, ...], unit) -> torch.Tensor:
    """The network through every bottleneck, each conv(+norm)(+relu) by ``unit(x, name, stride, relu)``."""
    x = unit(p["image"], "conv1", 2, True)
    x = F.max_pool2d(x, 3, 2, 1)
    for s, count in enumerate(blocks):
        for b in range(count):
            name, stride = f"layer{s + 1}.{b}", (2 if s > 0 and b == 0 else 1)
            h = unit(x, f"{name}.conv1", 1, True)
            h = unit(h, f"{name}.conv2", stride, True)
            h = unit(h, f"{name}.conv3", 1, False)
            short = unit(x, f"{name}.downsample", stride, False) if b == 0 else x
            x = F.relu(h + short)
    features = x.mean(dim=(2, 3))
    return features @ p["fc.w"] + p["fc.b"]


def test_resnet50_inference_with_folded_batchnorm_matches_torch() -> None:
    g = resnet50(2, 64, 10, **SMALL)
    inputs = inputs_for(g, seed=1)
    p = tensors(inputs)

    def unit(x: torch.Tensor, name: str, stride: int, relu: bool) -> torch.Tensor:
        w = p[f"{name}.w"]
        y = F.conv2d(x, w, channels(p[f"{name}.b"]), stride, w.shape[-1] // 2)
        return F.relu(y) if relu else y

    want = resnet_units(p, SMALL["blocks"], unit)
    near(sigdnn.Executor().run(g, inputs)["logits"], want)


def test_resnet50_training_step_gives_every_gradient_torch_gives() -> None:
    g = resnet50_training(2, 64, 10, **SMALL)
    inputs = inputs_for(g, seed=2)
    p = tensors(inputs)

    def unit(x: torch.Tensor, name: str, stride: int, relu: bool) -> torch.Tensor:
        w = p[f"{name}.w"]
        y = F.conv2d(x, w, None, stride, w.shape[-1] // 2)
        y = F.batch_norm(y, None, None, channels(p[f"{name}.bn.scale"]), channels(p[f"{name}.bn.bias"]), True,
                         eps=1e-5)  # fmt: skip
        return F.relu(y) if relu else y

    logits = resnet_units(p, SMALL["blocks"], unit)
    logits.backward(p["d_logits"])
    got = sigdnn.Executor().run(g, inputs)
    near(got["logits"], logits)
    params = [n for n in inputs if n not in ("image", "d_logits")]
    assert sorted(f"d.{n}" for n in params) == sorted(k for k in got if k != "logits")
    for n in params:
        near(got[f"d.{n}"].reshape(p[n].shape), p[n].grad, 1e-4)


def test_resnet50_at_full_size_has_torchvisions_parameters() -> None:
    """25,557,032 parameters (torchvision's resnet50); folding leaves one bias per batchnorm's two vectors."""
    trained = resnet50_training(1, 224, 1000, dtype="bfloat16")
    count = sum(t.size for t in trained.inputs if t.name not in ("image", "d_logits"))
    assert count == 25_557_032
    bn_channels = sum(t.size for t in trained.inputs if t.name.endswith(".bn.scale"))
    folded = resnet50(1, 224, 1000)
    assert sum(t.size for t in folded.inputs if t.name != "image") == count - bn_channels
    assert [t.name for t in trained.inputs if t.name.startswith("d.")] == []
    assert len([n for n in trained.nodes if n.op.kind == "conv_fprop"]) == 53


# -- Llama decoder layer ------------------------------------------------------------
LLAMA = {"batch": 2, "seq": 8, "dim": 32, "heads": 4, "hidden": 48, "kv_heads": 2, "dtype": "float32"}


def llama_reference(p: dict[str, torch.Tensor], heads: int, kv_heads: int) -> torch.Tensor:
    x = p["x"]
    b, s, dim = x.shape
    d = dim // heads

    def rms(z: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        return z * torch.rsqrt((z * z).mean(-1, keepdim=True) + 1e-5) * scale

    h = rms(x, p["attn_norm.scale"])
    q = (h @ p["wq"]).reshape(b, s, heads, d).transpose(1, 2)
    k = (h @ p["wk"]).reshape(b, s, kv_heads, d).transpose(1, 2).repeat_interleave(heads // kv_heads, 1)
    v = (h @ p["wv"]).reshape(b, s, kv_heads, d).transpose(1, 2).repeat_interleave(heads // kv_heads, 1)
    scores = (q @ k.transpose(-1, -2)) * d**-0.5
    scores = scores.masked_fill(torch.ones(s, s, dtype=torch.bool).triu(1), float("-inf"))
    o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(b, s, dim)
    h1 = x + o @ p["wo"]
    n2 = rms(h1, p["mlp_norm.scale"])
    return h1 + (F.silu(n2 @ p["w_gate"]) * (n2 @ p["w_up"])) @ p["w_down"]


def test_llama_layer_forward_matches_torch() -> None:
    g = llama_layer(**LLAMA)
    inputs = inputs_for(g, seed=3)
    near(sigdnn.Executor().run(g, inputs)["y"], llama_reference(tensors(inputs), 4, 2))


def test_llama_layer_backward_gives_dx_and_every_weight_gradient() -> None:
    g = llama_layer(**LLAMA, backward=True)
    inputs = inputs_for(g, seed=4)
    p = tensors(inputs)
    y = llama_reference(p, 4, 2)
    y.backward(p["dy"])
    got = sigdnn.Executor().run(g, inputs)
    near(got["y"], y)
    near(got["dx"], p["x"].grad, 1e-4)
    weights = [n for n in inputs if n not in ("x", "dy")]
    assert sorted(k for k in got if k.startswith("d.")) == sorted(f"d.{n}" for n in weights)
    for n in weights:
        near(got[f"d.{n}"].reshape(p[n].shape), p[n].grad, 1e-4)


def test_llama_layer_heads_are_views_and_full_size_has_7b_layer_parameters() -> None:
    plan = sigdnn.Executor().prepare(llama_layer(**LLAMA))
    moved = [s for s in plan.steps if s.node.op.kind in ("reshape", "transpose")]
    assert moved and all(s.builder.name == "view" for s in moved)
    g = llama_layer()
    assert sum(t.size for t in g.inputs if t.name != "x") == 4 * 4096**2 + 3 * 4096 * 11008 + 2 * 4096


@pytest.mark.parametrize(
    "build",
    [
        lambda: llama_layer(2, 8, 32, 4, 48, kv_heads=2, backward=True),
        lambda: resnet50_training(2, 32, 10, width=4, blocks=(1, 1, 1, 1)),
    ],
    ids=["llama_layer_backward", "resnet50_training"],
)
def test_on_the_gpu_every_data_movement_of_the_backward_graphs_is_a_view(build) -> None:
    """The weights' transposes for the dgrad GEMMs and dy's row reshapes read the caller's tensors in place
    (views into inputs, GPU backends only); on the H200 their copies were 9.9 of the Llama step's 16.1 ms."""
    from sigdnn.executor.views import plan_views
    from sigdnn.graph.checks import check_graph
    from sigdnn.graph.limits import DEFAULT_LIMITS

    g = build()
    order = check_graph(g, DEFAULT_LIMITS)
    views = plan_views(g, order, lambda i: True, into_inputs=True)
    moved = {i for i, n in enumerate(g.nodes) if n.op.moves_data}
    assert moved and moved <= views.nodes, sorted(g.nodes[i].name for i in moved - views.nodes)
    assert not moved <= plan_views(g, order, lambda i: True, into_inputs=False).nodes  # the inputs' views


# -- ViT ----------------------------------------------------------------------------
VIT = {"patch": 8, "dim": 64, "depth": 2, "heads": 4, "mlp": 128, "dtype": "float32"}


def test_vit_forward_matches_torch() -> None:
    g = vit(2, 32, 10, **VIT)
    inputs = inputs_for(g, seed=5)
    p = tensors(inputs)
    n, c, heads = 2, VIT["dim"], VIT["heads"]
    x = F.conv2d(p["image"], p["patch.w"], channels(p["patch.b"]), VIT["patch"]).flatten(2).transpose(1, 2)
    h = torch.cat([p["cls_token"], x], 1) + p["pos_embed"]
    t = h.shape[1]

    def ln(z: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(z, (c,), p[f"{name}.scale"].reshape(c), p[f"{name}.bias"].reshape(c), 1e-6)

    def linear(z: torch.Tensor, name: str) -> torch.Tensor:
        return z @ p[f"{name}.w"] + p[f"{name}.b"]

    for layer in range(VIT["depth"]):
        name = f"blocks.{layer}"
        qkv = linear(ln(h, f"{name}.ln1"), f"{name}.attn.qkv").reshape(n, t, 3, heads, c // heads)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(n, t, c)
        h = h + linear(o, f"{name}.attn.proj")
        h = h + linear(F.gelu(linear(ln(h, f"{name}.ln2"), f"{name}.fc1")), f"{name}.fc2")
    logits = ln(h, "ln")[:, 0] @ p["head.w"] + p["head.b"]
    near(sigdnn.Executor().run(g, inputs)["logits"], logits)


def test_vit_b16_at_full_size_has_torchvisions_parameters_and_runs_its_data_movement_as_views() -> None:
    g = vit(1, 224, 1000, dtype="bfloat16")
    assert sum(t.size for t in g.inputs if t.name != "image") == 86_567_656
    plan = sigdnn.Executor().prepare(vit(2, 32, 10, **VIT))
    copies = [s.name for s in plan.steps if s.node.op.moves_data and s.builder.name != "view"]
    assert sorted(copies) == ["pos.cls", "pos.patches", "tokens"]  # slices of the caller's pos_embed: never views


@pytest.mark.parametrize(
    "build",
    [
        lambda: resnet50(2, 32, 10, width=4, blocks=(1, 1, 1, 1)),
        lambda: resnet50_training(2, 32, 10, width=4, blocks=(1, 1, 1, 1)),
        lambda: llama_layer(2, 8, 32, 4, 48, kv_heads=2, backward=True),
        lambda: vit(2, 32, 10, patch=8, dim=64, depth=1, heads=4, mlp=128),
    ],
    ids=["resnet50", "resnet50_training", "llama_layer_backward", "vit"],
)
def test_validate_passes_on_the_bf16_models(build) -> None:
    from sigdnn.validation import validate

    report = validate(build(), backend="reference")
    assert report.passed, report
