"""Signature keys: hashable, equal across shapes, readable."""

from __future__ import annotations

import sigdnn
from sigdnn.dtypes import DataType
from sigdnn.signature_keys import SignatureKey, key_for

F16, BF16, F32 = DataType.FLOAT16, DataType.BFLOAT16, DataType.FLOAT32


def test_keys_ignore_dims_and_read_well() -> None:
    keys = set()
    for n in (3, 17):
        g = sigdnn.Graph("k", io_dtype="float16", compute_dtype="float32")
        a, b = g.tensor("a", dims=(n, 4)), g.tensor("b", dims=(1, 4))
        g.pointwise("add", a, b, name="add").set_output(True).set_data_type("float16")
        keys.add(key_for(g.nodes[0], g))
    assert len(keys) == 1
    key = keys.pop()
    assert key == SignatureKey("pointwise", (("mode", "add"),), (("in_0", F16), ("in_1", F16)), (("out_0", F16),), F32)
    assert str(key) == "Pointwise[add](f16,f16->f16; f32)"


def test_matmul_and_conv_keys() -> None:
    g = sigdnn.Graph("k", io_dtype="bfloat16", intermediate_dtype="float32", compute_dtype="float32")
    c = g.matmul(g.tensor("a", dims=(2, 3)), g.tensor("b", dims=(3, 5)), name="mm")
    x = g.tensor("x", dims=(1, 4, 5, 5, 5), layout="NDHWC")
    y = g.conv_fprop(x, g.tensor("w", dims=(8, 4, 1, 1, 1)), name="conv")
    assert key_for(g.nodes[0], g) == SignatureKey("matmul", (), (("a", BF16), ("b", BF16)), (("c", F32),), F32)
    conv = key_for(g.nodes[1], g)
    expected = SignatureKey("conv_fprop", (("spatial_rank", 3),), (("x", BF16), ("w", BF16)), (("y", F32),), F32)
    assert conv == expected
    assert str(conv) == "ConvFprop3d(bf16,bf16->f32; f32)"
    assert hash(conv) == hash(expected)
    assert c.is_virtual and y.is_virtual
