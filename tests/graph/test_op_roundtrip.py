"""Wire round trips of every new op: graph -> bytes -> graph is the identity, bytes -> graph -> bytes too.

Each graph uses its op's optional ports and attributes (absent and present),
odd layouts and explicit dtypes, so a field the codec drops or rewrites
shows up as an inequality or a changed byte.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sigdnn
from sigdnn.graph.ops import OP_CLASSES
from sigdnn.signature_keys import key_for


def assert_roundtrip(g: sigdnn.Graph) -> bytes:
    data = g.serialize()
    assert g.serialize() == data, "serialize is not deterministic"
    back = sigdnn.deserialize(data)
    assert back == g
    assert back.serialize() == data
    for a, b in zip(g.nodes, back.nodes):
        assert a.op == b.op and key_for(a, g) == key_for(b, back)
    return data


def conv_grads(g: sigdnn.Graph) -> None:
    x, w = g.tensor("x", (2, 4, 7, 6), layout="NHWC"), g.tensor("w", (6, 2, 3, 2), layout="NHWC")
    y = g.conv_fprop(x, w, pre_padding=(2, 0), post_padding=(0, 1), stride=(2, 1), dilation=(1, 2))
    g.conv_dgrad(y, w, pre_padding=(2, 0), post_padding=(0, 1), stride=(2, 1), dilation=(1, 2), dims=x.dims)
    g.conv_wgrad(x, y, pre_padding=(2, 0), post_padding=(0, 1), stride=(2, 1), dilation=(1, 2), dims=w.dims)
    g.conv_dgrad(g.tensor("dy1", (1, 5, 7)), g.tensor("w1", (5, 3, 3)), compute_dtype="float64")


def batchnorms(g: sigdnn.Graph) -> None:
    x = g.tensor("x", (2, 3, 4, 5), layout="NHWC")
    p = {n: g.tensor(n, (1, 3, 1, 1), dtype="float32") for n in ("s", "b", "rm", "rv")}
    g.batchnorm(x, p["s"], p["b"], epsilon=1e-3, name="bn")
    y, mean, inv, nrm, _ = g.batchnorm(x, p["s"], p["b"], p["rm"], p["rv"], 1e-5, 0.125, name="bn_running")
    nrm.set_output(True).set_name("nrm")
    z = g.batchnorm_inference(y, mean, inv, p["s"], p["b"], name="bn_inf")
    g.batchnorm_backward(z, x, p["s"], mean, inv, name="bn_bwd")


def norms(g: sigdnn.Graph) -> None:
    x, s, b = g.tensor("x", (2, 6, 8)), g.tensor("s", (1, 6, 8)), g.tensor("b", (1, 6, 8))
    y, mean, inv = g.layernorm("training", x, s, b, epsilon=1e-6, name="ln")
    g.layernorm("inference", x, s, b, name="ln_inf")
    g.layernorm_backward(y, x, s, mean, inv, name="ln_bwd")
    y2, inv2 = g.rmsnorm("training", x, s, None, 2e-5, name="rms")
    g.rmsnorm("inference", x, s, b, name="rms_inf_bias")
    g.rmsnorm_backward(y2, x, s, inv2, has_dbias=True, name="rms_bwd")
    g.rmsnorm_backward(y2, x, s, inv2, name="rms_bwd_nobias")


def softmax_reduction(g: sigdnn.Graph) -> None:
    x = g.tensor("x", (3, 4, 5), strides=(1, 15, 3))
    g.softmax(x, name="sm")
    g.softmax(x, axes=(0, 2), log=True, generate_stats=True, name="lsm")
    for i, mode in enumerate(("add", "mul", "min", "max", "amax", "avg", "norm1", "norm2", "mul_no_zeros")):
        g.reduction(x, mode, axes=(i % 3,), name=f"red_{mode}")
    g.reduction(g.tensor("ints", (4, 4), dtype="int32"), "max", (1, 4), compute_dtype="int32", name="red_int")


def attention(g: sigdnn.Graph) -> None:
    q = g.tensor("q", (2, 4, 5, 8), strides=(160, 8, 32, 1))
    k, v = g.tensor("k", (2, 2, 7, 8)), g.tensor("v", (2, 2, 7, 6))
    bias = g.tensor("bias", (1, 4, 1, 7))
    o, stats = g.sdpa(q, k, v, 0.125, bias, use_causal_mask=True, generate_stats=True, name="sdpa")
    g.sdpa(q, k, v, name="sdpa_inference")
    g.sdpa_backward(q, k, v, o, g.tensor("d_o", o.dims), stats, 0.125, bias, True, name="sdpa_bwd")


def varlen_attention(g: sigdnn.Graph) -> None:
    """Padded and ragged sdpa, and the gated delta rule ops with and without their optional state ports."""
    q = g.tensor("q", (2, 4, 5, 8), strides=(160, 8, 32, 1))
    lq, lkv = g.tensor("lq", (2,), dtype="int32"), g.tensor("lkv", (2, 1, 1, 1), dtype="int64")
    offsets = {p: g.tensor(f"{p}_off", (3,), dtype="int32") for p in ("q", "k", "v", "o")}
    o, stats = g.sdpa(q, q, q, 0.5, None, True, True, seq_len_q=lq, seq_len_kv=lkv, ragged_offsets=offsets)
    g.sdpa_backward(q, q, q, o, o, stats, 0.5, seq_len_kv=lkv, name="padded_bwd")
    t, h, kd, vd = 6, 2, 4, 3
    qk, v, beta = g.tensor("tq", (t, h, kd)), g.tensor("tv", (t, h, vd)), g.tensor("beta", (t, h))
    cu, h0 = g.tensor("cu", (3,), dtype="int32"), g.tensor("h0", (2, h, kd, vd), dtype="float32")
    gates = {"gdn": g.tensor("g", (t, h), dtype="float32"), "kda": g.tensor("gk", (t, h, kd), dtype="float32")}
    for kind, gate in gates.items():
        getattr(g, kind)(qk, qk, v, gate, beta, cu, h0, scale=0.25, use_qk_l2norm=True, output_final_state=True)
        getattr(g, kind)(qk, qk, v, gate, beta, cu, name=f"{kind}_plain")
        d_final = g.tensor(f"{kind}_df", (2, h, kd, vd))
        getattr(g, f"{kind}_bwd")(qk, qk, v, gate, beta, cu, h0, v, d_final, use_qk_l2norm=True)
        getattr(g, f"{kind}_bwd")(qk, qk, v, gate, beta, cu, None, v, scale=2.0, name=f"{kind}_bwd_plain")


def pooling_resample(g: sigdnn.Graph) -> None:
    x = g.tensor("x", (2, 3, 9, 8), layout="NHWC")
    for mode in ("max", "average_count_include_pad", "average_count_exclude_pad"):
        y = g.pooling(x, mode, (3, 2), (2, 2), pre_padding=(1, 0), post_padding=(2, 1), name=f"pool_{mode}")
        g.pooling_backward(y, x, mode, (3, 2), (2, 2), pre_padding=(1, 0), post_padding=(2, 1), name=f"bwd_{mode}")
    g.resample(x, "nearest", (2, 3, 4, 17), coordinates="asymmetric", name="rs_nearest")
    g.resample(x, "bilinear", scales=(1.5, 0.5), name="rs_scales")
    g.resample(x, "bilinear", (2, 3, 10, 10), coordinates="align_corners", name="rs_corners")
    dy = g.tensor("dy", (2, 3, 13, 4))
    g.resample_backward(dy, "nearest", (2, 3, 9, 8), coordinates="asymmetric", name="rs_bwd_nearest")
    g.resample_backward(dy, "bilinear", (2, 3, 9, 8), scales=(1.5, 0.5), name="rs_bwd_scales")


def data_movement(g: sigdnn.Graph) -> None:
    x = g.tensor("x", (3, 4, 5), dtype="int64")
    g.reshape(x, (5, 12), name="reshape")
    g.transpose(x, (1, 2, 0), name="transpose")
    g.slice(x, [slice(1, 3), slice(None, None, 3)], name="slice")
    parts = [x, g.tensor("y", (3, 1, 5), dtype="int64"), x]
    g.concatenate(parts, axis=1, name="concatenate").set_output(True).set_name("joined").set_data_type("float32")


BUILDERS: dict[str, Callable[[sigdnn.Graph], None]] = {
    "conv_grads": conv_grads,
    "batchnorms": batchnorms,
    "norms": norms,
    "softmax_reduction": softmax_reduction,
    "attention": attention,
    "varlen_attention": varlen_attention,
    "pooling_resample": pooling_resample,
    "data_movement": data_movement,
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_roundtrip(name: str) -> None:
    g = sigdnn.Graph(name, io_dtype="float16", intermediate_dtype="float32", compute_dtype="float32")
    BUILDERS[name](g)
    assert_roundtrip(g)


def test_every_op_has_a_roundtrip_graph() -> None:
    """The graphs above hold every op kind the package defines."""
    kinds: set[str] = set()
    for build in BUILDERS.values():
        g = sigdnn.Graph("all", io_dtype="float16")
        build(g)
        kinds |= {n.kind for n in g.nodes}
    in_tree = {kind for kind, cls in OP_CLASSES.items() if cls.__module__.startswith("sigdnn.graph.ops.")}
    assert in_tree - kinds == {"pointwise", "matmul"}  # the core ops have their own round-trip tests


@settings(max_examples=40, deadline=None)
@given(
    dims=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    data=st.data(),
)
def test_data_movement_attributes_roundtrip(dims: list[int], data: st.DataObject) -> None:
    g = sigdnn.Graph("move", io_dtype="bfloat16")
    x = g.tensor("x", dims)
    g.transpose(x, data.draw(st.permutations(range(len(dims)))))
    bounds = []
    for d in dims:
        start = data.draw(st.integers(0, d - 1))
        bounds.append(slice(start, data.draw(st.integers(start + 1, d)), data.draw(st.integers(1, 3))))
    g.slice(x, bounds)
    g.reshape(x, (*dims[::-1], 1))
    g.concatenate([x] * data.draw(st.integers(1, 5)), axis=data.draw(st.integers(0, len(dims) - 1)))
    assert_roundtrip(g)
