"""conv + bias + relu in NHWC float16 (float32 compute): a ResNet block's first half."""

from pathlib import Path

import sigdnn


def build() -> sigdnn.Graph:
    g = sigdnn.Graph("conv_bias_relu", io_dtype="float16", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(4, 32, 28, 28), layout="NHWC")
    w = g.tensor("w", dims=(64, 32, 3, 3), layout="NHWC")
    b = g.tensor("b", dims=(1, 64, 1, 1), layout="NHWC")
    y = g.conv_fprop(x, w, padding=(1, 1), stride=(1, 1), dilation=(1, 1), name="conv")
    z = g.pointwise("relu_fwd", g.pointwise("add", y, b, name="bias"), name="relu")
    z.set_output(True).set_name("z")
    return g


if __name__ == "__main__":
    out = Path(__file__).with_suffix(".sdg")
    out.write_bytes(build().serialize())
    print(f"wrote {out}")
