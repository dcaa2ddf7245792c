"""A long chain of pointwise nodes: buffer reuse keeps peak memory at two tensors."""

from pathlib import Path

import sigdnn

MODES = ("add", "mul", "tanh_fwd", "relu_fwd", "sub", "sigmoid_fwd", "swish_fwd", "abs")


def build(length: int = 64, dims: tuple[int, ...] = (64, 1024)) -> sigdnn.Graph:
    g = sigdnn.Graph("long_chain", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=dims)
    bias = g.tensor("bias", dims=(1, dims[-1]))
    t = x
    for i in range(length):
        mode = MODES[i % len(MODES)]
        t = (
            g.pointwise(mode, t, bias, name=f"n{i}")
            if mode in ("add", "mul", "sub")
            else g.pointwise(mode, t, name=f"n{i}")
        )
    t.set_output(True).set_name("y")
    return g


if __name__ == "__main__":
    out = Path(__file__).with_suffix(".sdg")
    out.write_bytes(build().serialize())
    print(f"wrote {out}")
