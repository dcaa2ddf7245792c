"""hipDNN's fused "batchnorm inference + relu backward + batchnorm backward" graph, NHWC float16.

The backward of batchnorm -> relu, recomputing the batchnorm's output from
the saved statistics instead of storing it: y = batchnorm_inference(x, saved
mean / inv_variance), dz = relu_bwd(dy, y), then batchnorm_backward gives
dx, dscale and dbias. float32 statistics and compute.
"""

from pathlib import Path

import sigdnn

N, C, H, W = 8, 32, 14, 14


def build() -> sigdnn.Graph:
    g = sigdnn.Graph("bn_relu_backward", io_dtype="float16", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (N, C, H, W), layout="NHWC")
    dy = g.tensor("dy", (N, C, H, W), layout="NHWC")
    scale, bias = g.tensor("scale", (1, C, 1, 1), dtype="float32"), g.tensor("bias", (1, C, 1, 1), dtype="float32")
    mean = g.tensor("mean", (1, C, 1, 1), dtype="float32")
    inv_variance = g.tensor("inv_variance", (1, C, 1, 1), dtype="float32")

    y = g.batchnorm_inference(x, mean, inv_variance, scale, bias, name="bn_recompute")
    dz = g.pointwise("relu_bwd", dy, y, name="relu_bwd")
    dx, dscale, dbias = g.batchnorm_backward(dz, x, scale, mean, inv_variance, name="bn_bwd")
    dx.set_output(True).set_name("dx")
    dscale.set_output(True).set_name("dscale").set_data_type("float32")
    dbias.set_output(True).set_name("dbias").set_data_type("float32")
    return g


if __name__ == "__main__":
    out = Path(__file__).with_suffix(".sdg")
    out.write_bytes(build().serialize())
    print(f"wrote {out}")
