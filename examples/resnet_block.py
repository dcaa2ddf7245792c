"""A ResNet basic block, forward and backward, in NHWC float32: what one training step of the block runs.

Forward: conv3x3 -> batchnorm -> relu -> conv3x3 -> batchnorm -> + x -> relu.
Backward from dy: relu_bwd, then each branch's batchnorm_backward,
conv_dgrad and conv_wgrad, and the identity path's gradient added to dx.
relu's gradient reads relu's output (as PyTorch keeps it: out > 0 exactly
where in > 0), so the pre-activations need not stay alive for the backward.
Outputs: y, dx, and the gradients of both kernels and both batchnorms.
"""

from pathlib import Path

import sigdnn

N, C, H, W = 4, 16, 12, 12


def build() -> sigdnn.Graph:
    g = sigdnn.Graph("resnet_block", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", (N, C, H, W), layout="NHWC")
    w1, w2 = (g.tensor(f"w{i}", (C, C, 3, 3), layout="NHWC") for i in (1, 2))
    s1, b1, s2, b2 = (g.tensor(n, (1, C, 1, 1)) for n in ("scale1", "bias1", "scale2", "bias2"))
    dy = g.tensor("dy", (N, C, H, W), layout="NHWC")

    c1 = g.conv_fprop(x, w1, padding=(1, 1), name="conv1")
    n1, mean1, inv1, _, _ = g.batchnorm(c1, s1, b1, epsilon=1e-5, name="bn1")
    a1 = g.pointwise("relu_fwd", n1, name="relu1")
    c2 = g.conv_fprop(a1, w2, padding=(1, 1), name="conv2")
    n2, mean2, inv2, _, _ = g.batchnorm(c2, s2, b2, epsilon=1e-5, name="bn2")
    pre = g.pointwise("add", n2, x, name="residual")
    y = g.pointwise("relu_fwd", pre, name="relu_out")

    d_pre = g.pointwise("relu_bwd", dy, y, name="relu_out_bwd")
    d_c2, dscale2, dbias2 = g.batchnorm_backward(d_pre, c2, s2, mean2, inv2, name="bn2_bwd")
    d_a1 = g.conv_dgrad(d_c2, w2, padding=(1, 1), name="conv2_dgrad")
    dw2 = g.conv_wgrad(a1, d_c2, padding=(1, 1), name="conv2_wgrad")
    d_n1 = g.pointwise("relu_bwd", d_a1, a1, name="relu1_bwd")
    d_c1, dscale1, dbias1 = g.batchnorm_backward(d_n1, c1, s1, mean1, inv1, name="bn1_bwd")
    d_x = g.conv_dgrad(d_c1, w1, padding=(1, 1), name="conv1_dgrad")
    dw1 = g.conv_wgrad(x, d_c1, padding=(1, 1), name="conv1_wgrad")
    dx = g.pointwise("add", d_x, d_pre, name="dx_sum")

    named = {"y": y, "dx": dx, "dw1": dw1, "dw2": dw2, "dscale1": dscale1, "dbias1": dbias1}
    named.update(dscale2=dscale2, dbias2=dbias2)
    for name, t in named.items():
        t.set_output(True).set_name(name)
    return g


if __name__ == "__main__":
    out = Path(__file__).with_suffix(".sdg")
    out.write_bytes(build().serialize())
    print(f"wrote {out}")
