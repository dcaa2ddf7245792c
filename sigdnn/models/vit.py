"""ViT (B/16 by default) forward: patch embedding, class token, position embedding, pre-norm encoder, head.

The patch embedding is a conv with the patch as kernel and stride over an
NHWC image; its output [N, C, h, w] in NHWC memory is already the token
matrix, seen as [N, h * w, C] through a transpose and a reshape (views).
The class token and the patches, each with its position embedding added,
are concatenated into the token tensor (a copy: see the note at the
concatenate). In each layer q, k and v are slices of one qkv projection seen
as heads through strides (views), and attention's output merges back the
same way. The op set has no broadcast-to op, so the class token is given
per image: ``cls_token`` [N, 1, C] (torch's ``cls_token.expand(N, -1, -1)``).

Parameters: ``patch.w`` [C, 3, P, P], ``patch.b`` [1, C, 1, 1], ``cls_token``,
``pos_embed`` [1, T, C]; per layer ``L.{ln1,ln2}.{scale,bias}`` [1, 1, C],
``L.qkv.w`` [C, 3C], ``L.qkv.b``, ``L.proj.{w,b}``, ``L.fc1.{w,b}``,
``L.fc2.{w,b}``; ``ln.{scale,bias}``, ``head.w`` [C, classes], ``head.b``.
"""

from __future__ import annotations

from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.views import view_layout

EPSILON = 1e-6


def _linear(g: Graph, x: Tensor, name: str, n_out: int) -> Tensor:
    w, b = g.tensor(f"{name}.w", (x.dims[-1], n_out)), g.tensor(f"{name}.b", (1, 1, n_out))
    return g.pointwise("add", g.matmul(x, w, name=name), b, name=f"{name}.bias")


def _layernorm(g: Graph, x: Tensor, name: str) -> Tensor:
    c = x.dims[-1]
    scale, bias = g.tensor(f"{name}.scale", (1, 1, c)), g.tensor(f"{name}.bias", (1, 1, c))
    return g.layernorm("inference", x, scale, bias, epsilon=EPSILON, name=name)[0]


def _attention(g: Graph, x: Tensor, name: str, heads: int) -> Tensor:
    n, t, c = x.dims
    d = c // heads
    qkv = view_layout(g, g.reshape(_linear(g, x, f"{name}.qkv", 3 * c), (n, t, 3, heads, d), name=f"{name}.split"))

    def part(i: int, what: str) -> Tensor:
        piece = view_layout(g, g.slice(qkv, [slice(None), slice(None), slice(i, i + 1)], name=f"{name}.{what}"))
        tokens = view_layout(g, g.reshape(piece, (n, t, heads, d), name=f"{name}.{what}_tokens"))
        return view_layout(g, g.transpose(tokens, (0, 2, 1, 3), name=f"{name}.{what}_heads"))

    o, _ = g.sdpa(part(0, "q"), part(1, "k"), part(2, "v"), d**-0.5, name=f"{name}.sdpa")
    merged = view_layout(g, g.transpose(o, (0, 2, 1, 3), name=f"{name}.o_tokens"))
    return _linear(g, view_layout(g, g.reshape(merged, (n, t, c), name=f"{name}.merge")), f"{name}.proj", c)


def vit(
    batch: int = 64,
    image: int = 224,
    classes: int = 1000,
    *,
    patch: int = 16,
    dim: int = 768,
    depth: int = 12,
    heads: int = 12,
    mlp: int = 3072,
    dtype: str = "bfloat16",
) -> Graph:
    """ViT forward: ``image`` [N, 3, H, W] (NHWC) -> ``logits`` [N, classes]."""
    g = Graph("vit", io_dtype=dtype, intermediate_dtype=dtype, compute_dtype="float32")
    x = g.tensor("image", (batch, 3, image, image), layout="NHWC")
    side = image // patch
    tokens = side * side + 1
    w = g.tensor("patch.w", (dim, 3, patch, patch), layout="NHWC")
    patches = g.conv_fprop(x, w, padding=(0, 0), stride=(patch, patch), name="patch")
    patches = g.pointwise("add", patches, g.tensor("patch.b", (1, dim, 1, 1)), name="patch.bias")
    patches = view_layout(g, g.transpose(patches, (0, 2, 3, 1), name="patch.tokens"))
    patches = view_layout(g, g.reshape(patches, (batch, side * side, dim), name="patch.flatten"))
    pos = g.tensor("pos_embed", (1, tokens, dim))
    cls_pos = g.slice(pos, [slice(None), slice(0, 1)], name="pos.cls")
    patch_pos = g.slice(pos, [slice(None), slice(1, tokens)], name="pos.patches")
    pieces = [
        g.pointwise("add", g.tensor("cls_token", (batch, 1, dim)), cls_pos, name="cls.pos"),
        g.pointwise("add", patches, patch_pos, name="patches.pos"),
    ]
    # The pieces keep packed strides, so the concatenate is a copy: cuTile's pointwise kernels write packed
    # outputs only. Laid out as their rows of the tokens (p.set_stride(h.strides)), the adds would write
    # straight into them and the concatenate would be a view.
    h = g.concatenate(pieces, 1, name="tokens")
    for layer in range(depth):
        name = f"blocks.{layer}"
        h = g.pointwise("add", h, _attention(g, _layernorm(g, h, f"{name}.ln1"), f"{name}.attn", heads),
                        name=f"{name}.attn_residual")  # fmt: skip
        hidden = g.pointwise("gelu_fwd", _linear(g, _layernorm(g, h, f"{name}.ln2"), f"{name}.fc1", mlp),
                             name=f"{name}.gelu")  # fmt: skip
        h = g.pointwise("add", h, _linear(g, hidden, f"{name}.fc2", dim), name=f"{name}.mlp_residual")
    h = _layernorm(g, h, "ln")
    cls = view_layout(g, g.slice(h, [slice(None), slice(0, 1)], name="cls"))
    features = view_layout(g, g.reshape(cls, (batch, dim), name="cls.flatten"))
    w_head, b_head = g.tensor("head.w", (dim, classes)), g.tensor("head.b", (1, classes))
    logits = g.pointwise("add", g.matmul(features, w_head, name="head"), b_head, name="head.bias")
    logits.set_output(True).set_name("logits")
    return g
