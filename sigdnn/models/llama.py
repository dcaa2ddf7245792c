"""A Llama-style decoder layer: rmsnorm, q / k / v projections, head split, causal SDPA, o projection, residual,
rmsnorm, SwiGLU MLP, residual; forward, or forward and backward from a given output gradient.

No rotary embedding (the op set has no gather or complex multiply to write
it with one node; it is pointwise work beside the attention). Heads are
split as views: the projection's [B, S, H * D] seen as [B, H, S, D]
through strides (BSHD memory), and merged back the same way, so the
executor runs no step for them; q, k and v reach SDPA as strided views.
Grouped-query attention when ``kv_heads`` < ``heads``.

Weights are [in, out] (``x @ w``): ``attn_norm.scale``, ``wq``, ``wk``,
``wv``, ``wo``, ``mlp_norm.scale``, ``w_gate``, ``w_up``, ``w_down``.
"""

from __future__ import annotations

from sigdnn.graph.graph import Graph
from sigdnn.graph.tensor import Tensor
from sigdnn.graph.views import view_layout

EPSILON = 1e-5


class _Layer:
    def __init__(self, g: Graph, batch: int, seq: int, heads: int, head_dim: int) -> None:
        self.g, self.batch, self.seq, self.heads, self.head_dim = g, batch, seq, heads, head_dim

    def split(self, x: Tensor, heads: int, name: str) -> Tensor:
        """[B, S, heads * D] -> [B, heads, S, D], a view."""
        g, b, s = self.g, self.batch, self.seq
        split = view_layout(g, g.reshape(x, (b, s, heads, self.head_dim), name=f"{name}.split"))
        return view_layout(g, g.transpose(split, (0, 2, 1, 3), name=f"{name}.heads"))

    def merge(self, x: Tensor, name: str) -> Tensor:
        """[B, H, S, D] -> [B, S, H * D]: views when x's memory is BSHD (SDPA's outputs follow q's layout)."""
        g, b, s = self.g, self.batch, self.seq
        tokens = view_layout(g, g.transpose(x, (0, 2, 1, 3), name=f"{name}.tokens"))
        return view_layout(g, g.reshape(tokens, (b, s, x.dims[1] * self.head_dim), name=f"{name}.merge"))

    def rows(self, x: Tensor, name: str) -> Tensor:
        """[B, S, F] -> [B * S, F], a view."""
        return view_layout(self.g, self.g.reshape(x, (self.batch * self.seq, x.dims[2]), name=name))

    def weight_grad(self, x: Tensor, dy: Tensor, name: str) -> Tensor:
        """x^T dy over every token: [in, out]."""
        g = self.g
        xt = view_layout(g, g.transpose(self.rows(x, f"{name}.x_rows"), (1, 0), name=f"{name}.x_t"))
        return g.matmul(xt, self.rows(dy, f"{name}.dy_rows"), name=name)

    def input_grad(self, dy: Tensor, w: Tensor, name: str) -> Tensor:
        """dy w^T, w^T a view of the caller's w (on the GPU; the GEMM reads it K-major)."""
        return self.g.matmul(dy, view_layout(self.g, self.g.transpose(w, (1, 0), name=f"{name}.w_t")), name=name)


def llama_layer(
    batch: int = 1,
    seq: int = 4096,
    dim: int = 4096,
    heads: int = 32,
    hidden: int = 11008,
    *,
    kv_heads: int | None = None,
    backward: bool = False,
    dtype: str = "bfloat16",
) -> Graph:
    """The decoder layer on ``x`` [B, S, dim] -> ``y``; with ``backward``, from ``dy`` also ``dx`` and
    ``d.<weight>`` for every weight."""
    kv_heads = kv_heads or heads
    head_dim = dim // heads
    g = Graph("llama_layer", io_dtype=dtype, intermediate_dtype=dtype, compute_dtype="float32")
    layer = _Layer(g, batch, seq, heads, head_dim)
    x = g.tensor("x", (batch, seq, dim))
    norm1, norm2 = g.tensor("attn_norm.scale", (1, 1, dim)), g.tensor("mlp_norm.scale", (1, 1, dim))
    wq = g.tensor("wq", (dim, heads * head_dim))
    wk, wv = g.tensor("wk", (dim, kv_heads * head_dim)), g.tensor("wv", (dim, kv_heads * head_dim))
    wo = g.tensor("wo", (heads * head_dim, dim))
    w_gate, w_up, w_down = (
        g.tensor("w_gate", (dim, hidden)),
        g.tensor("w_up", (dim, hidden)),
        g.tensor("w_down", (hidden, dim)),
    )
    phase = "training" if backward else "inference"

    h, inv1 = g.rmsnorm(phase, x, norm1, epsilon=EPSILON, name="attn_norm")
    q = layer.split(g.matmul(h, wq, name="q_proj"), heads, "q")
    k = layer.split(g.matmul(h, wk, name="k_proj"), kv_heads, "k")
    v = layer.split(g.matmul(h, wv, name="v_proj"), kv_heads, "v")
    scale = head_dim**-0.5
    o, stats = g.sdpa(q, k, v, scale, use_causal_mask=True, generate_stats=backward, name="attention")
    attn = layer.merge(o, "o")
    h1 = g.pointwise("add", x, g.matmul(attn, wo, name="o_proj"), name="attn_residual")
    n2, inv2 = g.rmsnorm(phase, h1, norm2, epsilon=EPSILON, name="mlp_norm")
    gate = g.matmul(n2, w_gate, name="gate_proj")
    up = g.matmul(n2, w_up, name="up_proj")
    silu = g.pointwise("swish_fwd", gate, name="silu")
    act = g.pointwise("mul", silu, up, name="swiglu")
    y = g.pointwise("add", h1, g.matmul(act, w_down, name="down_proj"), name="mlp_residual")
    y.set_output(True).set_name("y")
    if not backward:
        return g

    dy = g.tensor("dy", y.dims)
    grads = {"w_down": layer.weight_grad(act, dy, "w_down_grad")}
    d_act = layer.input_grad(dy, w_down, "down_dgrad")
    d_up = g.pointwise("mul", d_act, silu, name="d_up")
    d_gate = g.pointwise("swish_bwd", g.pointwise("mul", d_act, up, name="d_silu"), gate, name="d_gate")
    grads["w_gate"] = layer.weight_grad(n2, d_gate, "w_gate_grad")
    grads["w_up"] = layer.weight_grad(n2, d_up, "w_up_grad")
    d_n2 = g.pointwise(
        "add", layer.input_grad(d_gate, w_gate, "gate_dgrad"), layer.input_grad(d_up, w_up, "up_dgrad"), name="d_n2"
    )
    d_h1_norm, grads["mlp_norm.scale"], _ = g.rmsnorm_backward(d_n2, h1, norm2, inv2, name="mlp_norm_bwd")
    d_h1 = g.pointwise("add", dy, d_h1_norm, name="d_h1")
    grads["wo"] = layer.weight_grad(attn, d_h1, "wo_grad")
    d_o = layer.split(layer.input_grad(d_h1, wo, "o_dgrad"), heads, "d_o")
    dq, dk, dv = g.sdpa_backward(q, k, v, o, d_o, stats, scale, use_causal_mask=True, name="attention_bwd")
    dq, dk, dv = layer.merge(dq, "dq"), layer.merge(dk, "dk"), layer.merge(dv, "dv")
    grads.update(wq=layer.weight_grad(h, dq, "wq_grad"), wk=layer.weight_grad(h, dk, "wk_grad"))
    grads["wv"] = layer.weight_grad(h, dv, "wv_grad")
    d_h = g.pointwise("add", layer.input_grad(dq, wq, "q_dgrad"), layer.input_grad(dk, wk, "k_dgrad"), name="d_h_qk")
    d_h = g.pointwise("add", d_h, layer.input_grad(dv, wv, "v_dgrad"), name="d_h")
    d_x_norm, grads["attn_norm.scale"], _ = g.rmsnorm_backward(d_h, x, norm1, inv1, name="attn_norm_bwd")
    g.pointwise("add", d_h1, d_x_norm, name="d_x").set_output(True).set_name("dx")
    for p, t in grads.items():
        t.set_output(True).set_name(f"d.{p}")
    return g
