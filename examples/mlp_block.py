"""An MLP block in bfloat16: matmul + bias + gelu (exact erf form), float32 compute."""

from pathlib import Path

import sigdnn


def build() -> sigdnn.Graph:
    g = sigdnn.Graph("mlp_block", io_dtype="bfloat16", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(2, 128, 256))
    w = g.tensor("w", dims=(1, 256, 1024))
    b = g.tensor("b", dims=(1, 1, 1024))
    h = g.matmul(x, w, name="fc")
    y = g.pointwise("gelu_fwd", g.pointwise("add", h, b, name="bias"), name="gelu")
    y.set_output(True).set_name("y")
    return g


if __name__ == "__main__":
    out = Path(__file__).with_suffix(".sdg")
    out.write_bytes(build().serialize())
    print(f"wrote {out}")
