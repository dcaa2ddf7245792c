"""ONNX Attention (opset 23) -> sdpa: what each input form becomes, checked against torch float64 attention on the
same inputs, and every input, output and attribute sigdnn lacks refused by name."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import sigdnn
from sigdnn.errors import GraphError
from sigdnn.importers import onnx as onnx_import

torch = pytest.importorskip("torch")

B, H, S, D = 2, 2, 3, 4


def model(shapes: dict[str, list[int]], inputs: list[str], outputs=("y",), initializers=(), **attributes):
    ins = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in shapes.items()]
    if "mask" in shapes and "mask_bool" in attributes:
        attributes.pop("mask_bool")
        ins[-1] = helper.make_tensor_value_info("mask", TensorProto.BOOL, shapes["mask"])
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in outputs if n]
    graph = helper.make_graph(
        [helper.make_node("Attention", inputs, list(outputs), **attributes)],
        "attention",
        ins,
        outs,
        [numpy_helper.from_array(a, n) for n, a in initializers],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])


def torch_attention(q, k, v, scale, bias=None, causal=False) -> np.ndarray:
    """[B, H, S, D] float64 attention: softmax(scale q k^T + bias, masked) v."""
    s = scale * torch.tensor(q) @ torch.tensor(k).transpose(-1, -2)
    if bias is not None:
        s = s + torch.tensor(bias)
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool).triu(1), -math.inf)
    return (torch.softmax(s, -1) @ torch.tensor(v)).numpy()


def run(m, inputs: dict[str, np.ndarray]) -> tuple[sigdnn.Graph, np.ndarray]:
    g = onnx_import.load(m)
    return g, sigdnn.Executor("reference").run(g, inputs)["y"]


def qkv(rng, shape) -> dict[str, np.ndarray]:
    return {n: rng.standard_normal(shape).astype(np.float32) for n in "qkv"}


def test_three_dimensional_inputs_are_split_into_heads_and_merged_back() -> None:
    rng = np.random.default_rng(0)
    ins = qkv(rng, (B, S, H * D))
    m = model({n: [B, S, H * D] for n in "qkv"}, ["q", "k", "v"], q_num_heads=H, kv_num_heads=H)
    _, got = run(m, ins)
    heads = {n: a.astype(np.float64).reshape(B, S, H, D).transpose(0, 2, 1, 3) for n, a in ins.items()}
    want = torch_attention(heads["q"], heads["k"], heads["v"], 1 / math.sqrt(D))
    assert got.shape == (B, S, H * D)
    np.testing.assert_allclose(got, want.transpose(0, 2, 1, 3).reshape(B, S, H * D), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("boolean", [False, True])
def test_a_mask_input_known_only_at_run_time_is_a_bias(boolean: bool) -> None:
    """A float mask adds as it is; a boolean one (True: attend) becomes 0 / -inf (it was refused: the mask's
    dtype was read after its reshape to 4-d, whose output has none yet, so the bool mask went in as the bias)."""
    rng = np.random.default_rng(1)
    ins = qkv(rng, (B, H, S, D))
    shapes = {**{n: [B, H, S, D] for n in "qkv"}, "mask": [S, S]}
    extra = {"mask_bool": True} if boolean else {}
    m = model(shapes, ["q", "k", "v", "mask"], scale=0.5, **extra)
    mask = rng.random((S, S)) < 0.7 if boolean else rng.standard_normal((S, S)).astype(np.float32)
    mask[:, 0] = True if boolean else mask[:, 0]  # every row attends somewhere
    g, got = run(m, {**ins, "mask": mask})
    (node,) = [n for n in g.nodes if n.kind == "sdpa"]
    assert node.op.bias is not None and not node.op.use_causal_mask
    bias = np.where(mask, 0.0, -np.inf) if boolean else mask.astype(np.float64)
    want = torch_attention(*(ins[n].astype(np.float64) for n in "qkv"), 0.5, bias)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize(
    ("mask", "causal"),
    [
        (np.triu(np.full((S, S), -np.inf, np.float32), 1), True),
        (np.tril(np.ones((S, S), bool)), True),
        (np.array([0.0, -np.inf, 0.0], np.float32), False),  # one dim: no [Sq, Skv] matrix
        (np.triu(np.full((S, S + 1), -np.inf, np.float32), 1), None),  # not [Sq, Skv]: refused by shape
        (np.stack([np.triu(np.full((S, S), -np.inf, np.float32), 1), np.zeros((S, S), np.float32)]), False),
        (np.where(np.tril(np.ones((S, S), bool)), np.float32(0.0), np.float32(-1e4)), False),  # finite above
        (np.where(np.tril(np.ones((S, S), bool)), np.float32(0.5), np.float32(-np.inf)), False),  # nonzero below
    ],
    ids=["float causal", "bool causal", "1-d", "wrong shape", "per batch, differing", "finite", "nonzero kept"],
)
def test_only_the_top_left_causal_mask_becomes_use_causal_mask(mask: np.ndarray, causal: bool | None) -> None:
    rng = np.random.default_rng(2)
    ins = qkv(rng, (B, H, S, D))
    m = model({n: [B, H, S, D] for n in "qkv"}, ["q", "k", "v", "mask"], initializers=[("mask", mask)])
    if causal is None:
        with pytest.raises(GraphError):
            onnx_import.load(m)
        return
    g, got = run(m, ins)
    (node,) = [n for n in g.nodes if n.kind == "sdpa"]
    assert node.op.use_causal_mask is causal and (node.op.bias is None) is causal
    q, k, v = (ins[n].astype(np.float64) for n in "qkv")
    if causal:
        want = torch_attention(q, k, v, 1 / math.sqrt(D), causal=True)
    else:
        bias = np.where(mask, 0.0, -np.inf) if mask.dtype == np.bool_ else mask.astype(np.float64)
        want = torch_attention(q, k, v, 1 / math.sqrt(D), np.broadcast_to(bias, (1,) * (4 - bias.ndim) + bias.shape))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_is_causal_sets_the_mask() -> None:
    rng = np.random.default_rng(3)
    ins = qkv(rng, (B, H, S, D))
    g, got = run(model({n: [B, H, S, D] for n in "qkv"}, ["q", "k", "v"], is_causal=1, scale=0.25), ins)
    assert g.nodes[-1].op.use_causal_mask
    want = torch_attention(*(ins[n].astype(np.float64) for n in "qkv"), 0.25, causal=True)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


FOUR = {n: [B, H, S, D] for n in "qkv"}
REFUSED = [
    (dict(inputs=["q", "k", "v", "", "past_key"]), r"past_key / past_value \(KV cache\) inputs are not supported"),
    (dict(inputs=["q", "k", "v", "", "", "past_value"]), r"past_key / past_value \(KV cache\)"),
    (dict(inputs=["q", "k", "v", "", "", "", "nonpad"]), r"inputs beyond past_value \(nonpad_kv_seqlen, ...\)"),
    (dict(outputs=("y", "present_key")), r"only the first output \(Y\) is produced"),
    (dict(outputs=("y", "", "", "qk")), r"only the first output \(Y\) is produced"),
    (dict(softcap=2.0), "softcap is not supported"),
    (dict(qk_matmul_output_mode=1), "qk_matmul_output_mode is not supported"),
]


@pytest.mark.parametrize(("change", "message"), REFUSED, ids=[str(c) for c, _ in REFUSED])
def test_what_sigdnn_lacks_is_refused_by_name(change: dict, message: str) -> None:
    inputs = change.pop("inputs", ["q", "k", "v"])
    outputs = change.pop("outputs", ("y",))
    shapes = {**FOUR, **{n: [B, H, S, D] for n in inputs[3:] if n}}
    with pytest.raises(GraphError, match=message):
        onnx_import.load(model(shapes, inputs, outputs, **change))


@pytest.mark.parametrize("heads", [None, 3], ids=["no q_num_heads", "not dividing"])
def test_three_dimensional_inputs_need_heads_dividing_the_last_dim(heads) -> None:
    kw = {"q_num_heads": heads, "kv_num_heads": heads} if heads else {}
    m = model({n: [B, S, H * D] for n in "qkv"}, ["q", "k", "v"], **kw)
    with pytest.raises(GraphError, match=r"q \[2, 3, 8\]: 3-D inputs need q_num_heads / kv_num_heads dividing"):
        onnx_import.load(m)


def test_the_nodes_and_tensors_it_makes_are_named_after_the_onnx_node() -> None:
    """Names are what errors and plan reports show: each piece names the ONNX node and its part."""
    g = onnx_import.load(model({n: [B, S, H * D] for n in "qkv"}, ["q", "k", "v"], q_num_heads=H, kv_num_heads=H))
    parts = [f"{p}_{w}" for p in "qkv" for w in ("heads", "bhsd")] + ["sdpa", "o_bshd", "o_merge"]
    assert [n.name for n in g.nodes] == [f"Attention_0/{p}" for p in parts]
    shapes = {**{n: [B, H, S, D] for n in "qkv"}, "mask": [S, S]}
    g = onnx_import.load(model(shapes, ["q", "k", "v", "mask"], mask_bool=True))
    assert [n.name for n in g.nodes] == ["Attention_0/mask_4d", "Attention_0/mask_bias", "Attention_0/sdpa"]
    mask = np.random.default_rng(4).standard_normal((S, S)).astype(np.float32)
    g = onnx_import.load(
        model({n: [B, H, S, D] for n in "qkv"}, ["q", "k", "v", "mask"], initializers=[("mask", mask)])
    )
    (node,) = g.nodes
    assert g.tensors[node.op.bias].name == "Attention_0/mask"


def test_softmax_precision_is_accepted_and_changes_nothing() -> None:
    rng = np.random.default_rng(5)
    ins = qkv(rng, (B, H, S, D))
    _, got = run(model(FOUR, ["q", "k", "v"], softmax_precision=TensorProto.FLOAT), ins)
    want = torch_attention(*(ins[n].astype(np.float64) for n in "qkv"), 1 / math.sqrt(D))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)


def test_a_three_dimensional_query_with_four_dimensional_keys_gives_a_three_dimensional_output() -> None:
    """The output takes the query's form (as onnx.reference does): Y is [B, S, H * Dv] for a 3-d q."""
    rng = np.random.default_rng(6)
    q = rng.standard_normal((B, S, H * D)).astype(np.float32)
    k, v = (rng.standard_normal((B, H, S, D)).astype(np.float32) for _ in range(2))
    m = model({"q": [B, S, H * D], "k": [B, H, S, D], "v": [B, H, S, D]}, ["q", "k", "v"], q_num_heads=H)
    _, got = run(m, {"q": q, "k": k, "v": v})
    q4 = q.astype(np.float64).reshape(B, S, H, D).transpose(0, 2, 1, 3)
    want = torch_attention(q4, k.astype(np.float64), v.astype(np.float64), 1 / math.sqrt(D))
    np.testing.assert_allclose(got, want.transpose(0, 2, 1, 3).reshape(B, S, H * D), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("which", ["k", "v"])
def test_a_three_dimensional_key_or_value_without_kv_num_heads_is_refused_by_name(which: str) -> None:
    shapes = {**FOUR, which: [B, S, H * D]}
    with pytest.raises(GraphError, match=rf"{which} \[2, 3, 8\]: 3-D inputs need q_num_heads / kv_num_heads"):
        onnx_import.load(model(shapes, ["q", "k", "v"]))


def test_a_lower_triangle_that_is_not_all_zero_stays_a_bias() -> None:
    """0 on the diagonal, -1 below it, -inf above: causal in shape, not in value."""
    mask = np.where(np.tril(np.ones((S, S), bool), -1), np.float32(-1.0), np.float32(0.0))
    mask[np.triu_indices(S, 1)] = -np.inf
    rng = np.random.default_rng(7)
    ins = qkv(rng, (B, H, S, D))
    g, got = run(model(FOUR, ["q", "k", "v", "mask"], initializers=[("mask", mask)]), ins)
    assert not g.nodes[-1].op.use_causal_mask and g.nodes[-1].op.bias is not None
    want = torch_attention(*(ins[n].astype(np.float64) for n in "qkv"), 1 / math.sqrt(D), mask.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-6)
