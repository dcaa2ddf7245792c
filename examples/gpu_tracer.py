"""What the GPU backend runs today: add, mul, relu and tanh in bfloat16 (cuTile).

`sigdnn validate examples/gpu_tracer.sdg` runs it on the GPU and on the
reference and compares every output.
"""

from pathlib import Path

import sigdnn


def build() -> sigdnn.Graph:
    g = sigdnn.Graph("gpu_tracer", io_dtype="bfloat16", intermediate_dtype="bfloat16", compute_dtype="float32")
    x = g.tensor("x", dims=(16, 256, 1024))
    y = g.tensor("y", dims=(16, 256, 1024))
    scale = g.tensor("scale", dims=(1, 256, 1))
    h = g.pointwise(
        "relu_fwd", g.pointwise("mul", g.pointwise("add", x, y, name="add"), scale, name="scale"), name="relu"
    )
    g.pointwise("tanh_fwd", h, name="tanh").set_output(True).set_name("out")
    return g


if __name__ == "__main__":
    out = Path(__file__).with_suffix(".sdg")
    out.write_bytes(build().serialize())
    print(f"wrote {out}")
