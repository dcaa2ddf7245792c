"""Pointwise-heavy: swish, comparisons and binary_select, as in a gated activation."""

from pathlib import Path

import sigdnn


def build() -> sigdnn.Graph:
    g = sigdnn.Graph("pointwise_heavy", io_dtype="float32", intermediate_dtype="float32", compute_dtype="float32")
    x = g.tensor("x", dims=(8, 64, 32))
    gate = g.tensor("gate", dims=(8, 64, 32))
    limit = g.tensor("limit", dims=(1, 64, 1))
    s = g.pointwise("swish_fwd", x, swish_beta=1.702, name="swish")
    big = g.pointwise("cmp_gt", gate, limit, name="gate_gt_limit").set_data_type("bool")
    clipped = g.pointwise("min", s, limit, name="clip")
    chosen = g.pointwise("binary_select", s, clipped, big, name="select")
    y = g.pointwise("mul", chosen, g.pointwise("sigmoid_fwd", gate, name="sigmoid"), name="gated")
    y.set_output(True).set_name("y")
    big_out = g.pointwise("logical_not", big, name="not_big").set_data_type("bool")
    big_out.set_output(True).set_name("below_limit")
    return g


if __name__ == "__main__":
    out = Path(__file__).with_suffix(".sdg")
    out.write_bytes(build().serialize())
    print(f"wrote {out}")
