"""A pre-norm transformer block in bfloat16 (float32 intermediates and compute).

layernorm -> one qkv matmul -> q, k, v sliced out and split into heads ->
causal sdpa -> heads merged -> out projection -> residual add -> rmsnorm ->
MLP (matmul + bias, gelu, matmul) -> residual add.
"""

from pathlib import Path

import sigdnn

B, S, E, HEADS = 2, 16, 64, 4
D = E // HEADS


def build() -> sigdnn.Graph:
    g = sigdnn.Graph("transformer_block", io_dtype="bfloat16", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (B, S, E))
    ln_scale, ln_bias = g.tensor("ln_scale", (1, 1, E)), g.tensor("ln_bias", (1, 1, E))
    w_qkv, w_out = g.tensor("w_qkv", (1, E, 3 * E)), g.tensor("w_out", (1, E, E))
    rms_scale = g.tensor("rms_scale", (1, 1, E))
    w_up, b_up, w_down = (
        g.tensor("w_up", (1, E, 4 * E)),
        g.tensor("b_up", (1, 1, 4 * E)),
        g.tensor("w_down", (1, 4 * E, E)),
    )

    h, _, _ = g.layernorm("inference", x, ln_scale, ln_bias, epsilon=1e-5, name="ln")
    qkv = g.matmul(h, w_qkv, name="qkv")

    def heads(part: int, name: str) -> sigdnn.Tensor:
        sliced = g.slice(qkv, [slice(None), slice(None), slice(part * E, (part + 1) * E)], name=f"{name}_slice")
        return g.transpose(
            g.reshape(sliced, (B, S, HEADS, D), name=f"{name}_split"), (0, 2, 1, 3), name=f"{name}_heads"
        )

    q, k, v = heads(0, "q"), heads(1, "k"), heads(2, "v")
    o, _ = g.sdpa(q, k, v, attn_scale=D**-0.5, use_causal_mask=True, name="attention")
    merged = g.reshape(g.transpose(o, (0, 2, 1, 3), name="o_tokens"), (B, S, E), name="o_merge")
    h1 = g.pointwise("add", g.matmul(merged, w_out, name="out_proj"), x, name="residual1")
    n, _ = g.rmsnorm("inference", h1, rms_scale, epsilon=1e-6, name="rmsnorm")
    up = g.pointwise("gelu_fwd", g.pointwise("add", g.matmul(n, w_up, name="up"), b_up, name="up_bias"), name="gelu")
    y = g.pointwise("add", g.matmul(up, w_down, name="down"), h1, name="residual2")
    y.set_output(True).set_name("y")
    return g


if __name__ == "__main__":
    out = Path(__file__).with_suffix(".sdg")
    out.write_bytes(build().serialize())
    print(f"wrote {out}")
