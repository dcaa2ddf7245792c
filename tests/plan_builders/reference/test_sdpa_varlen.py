"""Variable-length sdpa on the reference: padding masks and ragged (THD) tensors against torch per sequence.

The oracle runs torch's float64 attention on each sequence cut to its
lengths (so nothing of the padding can reach it), with autograd for the
backward; only the positions inside sequences are compared, as docs/ops.md
states the rest is unspecified.
"""

from __future__ import annotations

import numpy as np
import pytest

import sigdnn
from sigdnn.errors import ExecutionError, GraphError, UsageError

torch = pytest.importorskip("torch")

B, HQ, HKV, SQ, SKV, D, DV = 3, 4, 2, 5, 7, 4, 3


def per_sequence(q, k, v, do, lq, lkv, scale, causal):
    """torch float64 o, stats, dq, dk, dv per sequence ([H, len, E] arrays), masked rows dropped."""
    found = []
    for b in range(q.shape[0]):
        qt = torch.tensor(q[b, :, : lq[b]], requires_grad=True)
        kt = torch.tensor(k[b, :, : lkv[b]], requires_grad=True)
        vt = torch.tensor(v[b, :, : lkv[b]], requires_grad=True)
        ke = kt.repeat_interleave(HQ // HKV, 0)
        ve = vt.repeat_interleave(HQ // HKV, 0)
        s = scale * qt @ ke.transpose(-1, -2)
        if causal:
            s = s.masked_fill(torch.ones_like(s, dtype=torch.bool).triu(1), float("-inf"))
        stats = torch.logsumexp(s, -1, keepdim=True)
        p = torch.nan_to_num(torch.softmax(s, -1))
        o = p @ ve
        o.backward(torch.tensor(do[b, :, : lq[b]]))
        grads = [t.grad if t.grad is not None else torch.zeros_like(t) for t in (qt, kt, vt)]
        found.append([o.detach().numpy(), stats.detach().numpy(), *(g.numpy() for g in grads)])
    return found


def bshd(dims):
    _, h, s, e = dims
    return (s * h * e, e, h * e, 1)


def thd_view(packed: np.ndarray, dims) -> np.ndarray:
    """The logical [B, H, S, E] array whose BSHD storage begins with ``packed`` ([tokens, H, E])."""
    flat = np.zeros(int(np.prod(dims)))
    flat[: packed.size] = packed.reshape(-1)
    return np.lib.stride_tricks.as_strided(flat, dims, tuple(8 * s for s in bshd(dims))).copy()


def thd_tokens(logical: np.ndarray, dims, tokens: int) -> np.ndarray:
    flat = np.empty(int(np.prod(dims)))
    np.lib.stride_tricks.as_strided(flat, dims, tuple(8 * s for s in bshd(dims)))[...] = logical
    return flat[: tokens * dims[1] * dims[3]].reshape(tokens, dims[1], dims[3])


def offsets(lengths, heads, e):
    return np.concatenate([[0], np.cumsum(np.asarray(lengths) * heads * e)]).astype(np.int64)


def build(ragged: bool, causal: bool, index_dtype: str = "int32", constants: dict | None = None, ports: str = "qkvo"):
    """The forward and backward graph (``ports``: the ragged ones); ``constants``: lengths and offsets (by name)
    made graph constants, where given."""
    g = sigdnn.Graph("varlen", io_dtype="float64", compute_dtype="float64")
    dq_, dk_, dv_, do_ = (B, HQ, SQ, D), (B, HKV, SKV, D), (B, HKV, SKV, DV), (B, HQ, SQ, DV)
    q, k, v = (
        g.tensor("q", dq_, strides=bshd(dq_)),
        g.tensor("k", dk_, strides=bshd(dk_)),
        g.tensor("v", dv_, strides=bshd(dv_)),
    )

    def index(name, dims, dtype):
        return (
            g.constant(name, constants[name]) if constants and name in constants else g.tensor(name, dims, dtype=dtype)
        )

    lq = index("lq", (B, 1, 1, 1), index_dtype)
    lkv = index("lkv", (B, 1, 1, 1), index_dtype)
    offs = {}
    if ragged:
        offs = {p: index(f"{p}_off", (B + 1, 1, 1, 1), "int64") for p in ports}
    o, stats = g.sdpa(q, k, v, 0.45, None, causal, True, seq_len_q=lq, seq_len_kv=lkv, ragged_offsets=offs, name="fwd")
    o.set_output(True).set_name("o")
    stats.set_output(True).set_name("stats").set_data_type("float64")
    o_in, do = g.tensor("o_in", do_, strides=bshd(do_)), g.tensor("do", do_, strides=bshd(do_))
    st = g.tensor("st", (B, HQ, SQ, 1))
    grads = g.sdpa_backward(
        q, k, v, o_in, do, st, 0.45, None, causal, seq_len_q=lq, seq_len_kv=lkv, ragged_offsets=offs, name="bwd"
    )
    for t, n in zip(grads, ("dq", "dk", "dv")):
        t.set_output(True).set_name(n)
    return g


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("ragged", [False, True])
def test_variable_lengths_match_torch_per_sequence(ragged: bool, causal: bool) -> None:
    rng = np.random.default_rng(3 + ragged + 2 * causal)
    lq, lkv = np.array([5, 1, 3]), np.array([7, 2, 0 if not causal else 4])
    q, do = rng.standard_normal((B, HQ, SQ, D)), rng.standard_normal((B, HQ, SQ, DV))
    k, v = rng.standard_normal((B, HKV, SKV, D)), rng.standard_normal((B, HKV, SKV, DV))
    want = per_sequence(q, k, v, do, lq, lkv, 0.45, causal)
    # forward once to get o and stats for the backward's inputs
    inputs = {"lq": lq.reshape(B, 1, 1, 1).astype(np.int32), "lkv": lkv.reshape(B, 1, 1, 1).astype(np.int32)}
    arrays = {"q": q, "k": k, "v": v, "do": do}
    if ragged:
        for name, (x, lens) in {"q": (q, lq), "k": (k, lkv), "v": (v, lkv), "do": (do, lq)}.items():
            packed = np.concatenate([x[b, :, : lens[b]].transpose(1, 0, 2) for b in range(B)])
            arrays[name] = thd_view(packed, x.shape)
        for p, (heads, e, lens) in {
            "q": (HQ, D, lq),
            "k": (HKV, D, lkv),
            "v": (HKV, DV, lkv),
            "o": (HQ, DV, lq),
        }.items():
            inputs[f"{p}_off"] = offsets(lens, heads, e).reshape(B + 1, 1, 1, 1)
    else:
        for name, lens in (("q", lq), ("do", lq), ("k", lkv), ("v", lkv)):  # garbage in the padding never leaks
            for b in range(B):
                arrays[name][b, :, lens[b] :] = np.nan
    g = build(ragged, causal)
    ex = sigdnn.Executor("reference")
    plan = ex.prepare(g)
    stats_in = np.zeros((B, HQ, SQ, 1))
    out = ex.execute(plan, {**inputs, **arrays, "o_in": np.zeros((B, HQ, SQ, DV)), "st": stats_in})
    o_ref = np.zeros((B, HQ, SQ, DV))
    for b in range(B):
        o_ref[b, :, : lq[b]] = want[b][0]
        stats_in[b, :, : lq[b]] = want[b][1]
    o_in = (
        thd_view(np.concatenate([o_ref[b, :, : lq[b]].transpose(1, 0, 2) for b in range(B)]), o_ref.shape)
        if ragged
        else o_ref
    )
    out = ex.execute(plan, {**inputs, **arrays, "o_in": o_in, "st": stats_in})
    results = {"o": (out["o"], lq, 0), "stats": (out["stats"], lq, 1), "dq": (out["dq"], lq, 2)}
    results.update({"dk": (out["dk"], lkv, 3), "dv": (out["dv"], lkv, 4)})
    for name, (got, lens, i) in results.items():
        if ragged and name != "stats":
            tokens = thd_tokens(got, got.shape, int(lens.sum()))
            starts = np.concatenate([[0], np.cumsum(lens)])
            pieces = [tokens[starts[b] : starts[b + 1]].transpose(1, 0, 2) for b in range(B)]
        else:
            pieces = [got[b, :, : lens[b]] for b in range(B)]
        for b in range(B):
            np.testing.assert_allclose(pieces[b], want[b][i], rtol=1e-11, atol=1e-12, err_msg=f"{name} batch {b}")


def test_outside_sequences_the_reference_writes_zero_and_minus_infinity() -> None:
    g = build(False, False)
    rng = np.random.default_rng(0)
    lq, lkv = np.array([2, 5, 1]), np.array([3, 7, 1])
    ins = {
        "q": rng.standard_normal((B, HQ, SQ, D)), "k": rng.standard_normal((B, HKV, SKV, D)),
        "v": rng.standard_normal((B, HKV, SKV, DV)), "do": rng.standard_normal((B, HQ, SQ, DV)),
        "o_in": rng.standard_normal((B, HQ, SQ, DV)), "st": rng.standard_normal((B, HQ, SQ, 1)),
        "lq": lq.reshape(B, 1, 1, 1).astype(np.int32), "lkv": lkv.reshape(B, 1, 1, 1).astype(np.int32),
    }  # fmt: skip
    out = sigdnn.Executor("reference").execute(sigdnn.Executor("reference").prepare(g), ins)
    assert np.all(out["o"][0, :, 2:] == 0) and np.all(np.isneginf(out["stats"][2, :, 1:]))
    assert np.all(out["dq"][0, :, 2:] == 0) and np.all(out["dk"][0, :, 3:] == 0) and np.all(out["dv"][2, :, 1:] == 0)
    assert np.any(out["dq"][0, :, :2] != 0) and np.any(out["dk"][1] != 0)


def inputs_for(g, **override):
    rng = np.random.default_rng(1)
    ins = {t.name: rng.standard_normal(t.dims) for t in g.inputs if g.dtype_of(t).is_float}
    ins.update(lq=np.full((B, 1, 1, 1), 2, np.int32), lkv=np.full((B, 1, 1, 1), 3, np.int32))
    for p in ("q", "k", "v", "o"):
        if any(t.name == f"{p}_off" for t in g.inputs):
            ins[f"{p}_off"] = np.arange(B + 1).reshape(B + 1, 1, 1, 1) * 3 * 16
    ins.update(override)
    return ins


HOSTILE = [
    (
        {"lq": np.array([2, 6, 1], np.int32).reshape(B, 1, 1, 1)},
        r"tensor 'lq' holds length 6 at batch 1; lengths lie in \[0, 5\]",
    ),
    ({"lkv": np.array([-1, 2, 1], np.int32).reshape(B, 1, 1, 1)}, r"tensor 'lkv' holds length -1 at batch 0"),
    (
        {
            "k_off": np.array([0, 10, 20, 1 << 40]).reshape(B + 1, 1, 1, 1) * 0
            + np.array([0, 0, 200, 0]).reshape(B + 1, 1, 1, 1)
        },
        r"tensor 'k_off' places sequence 2 .* outside tensor 'k'",
    ),
    ({"q_off": np.array([-8, 0, 0, 0]).reshape(B + 1, 1, 1, 1)}, r"tensor 'q_off' places sequence 0"),
    (
        {"o_off": np.array([0, 8, 0, 0]).reshape(B + 1, 1, 1, 1)},
        r"tensor 'o_off' makes sequences of output 'o' overlap",
    ),
]


@pytest.mark.parametrize(("override", "message"), HOSTILE)
def test_hostile_lengths_and_offsets_are_execution_errors_naming_the_tensor(override, message) -> None:
    g = build(True, False)
    plan = sigdnn.Executor("reference").prepare(g)
    with pytest.raises(ExecutionError, match=message):
        sigdnn.Executor("reference").execute(plan, inputs_for(g, **override))


INDEX_NAMES = ("lq", "lkv", "q_off", "k_off", "v_off", "o_off")


@pytest.mark.parametrize(("override", "message"), HOSTILE)
def test_hostile_constant_lengths_and_offsets_are_refused_with_the_graph(override, message) -> None:
    """The same values as graph constants: the graph is refused when checked (a GraphError naming the tensor), so
    no plan is made that cannot run (the buffer fuzzer's open finding)."""
    values = inputs_for(build(True, False), **override)
    message = message.replace("output 'o'", "output 'fwd::o'")  # checked as g.sdpa makes o, before it is renamed
    with pytest.raises(GraphError, match=message):
        build(True, False, constants={n: np.asarray(values[n]) for n in INDEX_NAMES})


def test_valid_constant_lengths_and_offsets_prepare_and_match_the_same_values_given_at_run() -> None:
    values = inputs_for(build(True, False))
    given = sigdnn.Executor("reference").run(build(True, False), values)
    fixed = sigdnn.Executor("reference").run(
        build(True, False, constants={n: np.asarray(values[n]) for n in INDEX_NAMES}),
        {n: v for n, v in values.items() if n not in INDEX_NAMES},
    )
    for name, value in given.items():
        np.testing.assert_array_equal(fixed[name], value, err_msg=name)


def test_constant_places_of_big_tensors_are_left_to_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past CHECKED_AT_PREPARE elements the check (a position per element) waits for the run."""
    from sigdnn.graph.ops import ragged

    monkeypatch.setattr(ragged, "CHECKED_AT_PREPARE", 8)
    values = inputs_for(build(True, False), o_off=np.array([0, 8, 0, 0]).reshape(B + 1, 1, 1, 1))
    g = build(True, False, constants={n: np.asarray(values[n]) for n in INDEX_NAMES})
    plan = sigdnn.Executor("reference").prepare(g)
    with pytest.raises(ExecutionError, match="makes sequences of output 'o' overlap"):
        sigdnn.Executor("reference").execute(plan, {n: v for n, v in values.items() if n not in INDEX_NAMES})


def test_graph_rules_of_lengths_and_offsets() -> None:
    def graph(index_dtype="int32", length_dims=(B,), offset_dims=(B + 1,), with_lengths=True, k_strides=None):
        g = sigdnn.Graph("r", io_dtype="float32")
        q = g.tensor("q", (B, HQ, SQ, D))
        k, v = (
            g.tensor("k", (B, HKV, SKV, D), strides=k_strides or bshd((B, HKV, SKV, D))),
            g.tensor("v", (B, HKV, SKV, D)),
        )
        lq = g.tensor("lq", (B,), dtype="int32")
        lkv = g.tensor("lkv", length_dims, dtype=index_dtype) if with_lengths else None
        off = g.tensor("k_off", offset_dims, dtype="int64")
        g.sdpa(q, k, v, seq_len_q=lq, seq_len_kv=lkv, ragged_offsets={"k": off}, name="a")[0].set_output(True)
        return g

    sigdnn.Executor("reference").prepare(graph())
    g = graph()
    g.tensors[g.nodes[0].op.seq_len_q].set_data_type("float16")
    with pytest.raises(GraphError, match=r"port 'seq_len_q' \(tensor 'lq'\) must be int32 or int64"):
        sigdnn.Executor("reference").prepare(g)
    cases = [
        (
            dict(index_dtype="float32"),
            r"port 'seq_len_kv' \(tensor 'lkv'\) must be int32 or int64 \(one sequence length",
        ),
        (dict(length_dims=(B + 1,)), r"'lkv'\) has 4 elements, expected 3 \(one sequence length per batch entry\)"),
        (
            dict(offset_dims=(B,)),
            r"'k_off'\) has 3 elements, expected 4 \(one element offset per batch entry, plus the total\)",
        ),
        (dict(with_lengths=False), r"'k_off'\) needs seq_len_kv"),
        (dict(k_strides=(2 * SKV * HKV * D, D, HKV * D, 1)), r"ragged port 'k' \(tensor 'k'\) has strides"),
    ]
    for kwargs, message in cases:
        with pytest.raises(GraphError, match=message):
            sigdnn.Executor("reference").prepare(graph(**kwargs))
    with pytest.raises(UsageError, match="ragged_offsets takes the keys"):
        g = sigdnn.Graph("r", io_dtype="float32")
        q = g.tensor("q", (B, HQ, SQ, D))
        g.sdpa(q, q, q, ragged_offsets={"x": q})


def test_a_ragged_gradient_needs_its_forward_tensors_strides() -> None:
    g = sigdnn.Graph("r", io_dtype="float32")
    q, o, do = (g.tensor(n, (B, HQ, SQ, D), strides=bshd((B, HQ, SQ, D))) for n in ("q", "o", "do"))
    k, v = g.tensor("k", (B, HKV, SKV, D)), g.tensor("v", (B, HKV, SKV, D))
    st = g.tensor("st", (B, HQ, SQ, 1))
    lq = g.tensor("lq", (B,), dtype="int32")
    dq, _, _ = g.sdpa_backward(
        q, k, v, o, do, st, seq_len_q=lq, ragged_offsets={"q": g.tensor("qo", (B + 1,), dtype="int32")}
    )
    dq.set_stride((SQ * HQ * D, SQ * D, D, 1))
    with pytest.raises(GraphError, match=r"ragged port 'dq' .* needs q's strides"):
        sigdnn.Executor("reference").prepare(g)


def test_new_wire_fields_round_trip_and_old_buffers_still_read() -> None:
    g = build(True, True)
    back = sigdnn.deserialize(g.serialize())
    assert back == g
    fwd = back.nodes[0].op
    assert fwd.seq_len_q is not None and fwd.o_ragged_offset is not None
    old = sigdnn.Graph("old", io_dtype="float32")
    q = old.tensor("q", (1, 2, 3, 4))
    old.sdpa(q, q, q)[0].set_output(True)
    old.schema_version = (1, 3)
    read = sigdnn.deserialize(old.serialize())
    assert read.schema_version == (1, 3) and read.nodes[0].op.seq_len_q is None


def test_keys_tell_padded_and_ragged_nodes_apart() -> None:
    plain = sigdnn.Graph("p", io_dtype="float32")
    q = plain.tensor("q", (B, HQ, SQ, D))
    plain.sdpa(q, q, q, name="a")[0].set_output(True)
    ragged = build(True, False)
    keys = [sigdnn.Executor("reference").prepare(x).steps[0].key for x in (plain, ragged)]
    traits = [dict(k.traits) for k in keys]
    assert traits[0]["padding"] is False and traits[0]["ragged"] == ()
    assert traits[1]["padding"] is True and traits[1]["ragged"] == ("q", "k", "v", "o")


def test_the_builders_decline_a_non_float_tensor_but_take_integer_lengths_and_offsets() -> None:
    """check_graph refuses an integer k first; the builders' own check still declines it for a key that carries one."""
    from sigdnn.errors import NotSupported
    from sigdnn.plan_builders.reference.sdpa import ReferenceSdpa, ReferenceSdpaBackward

    g = build(True, False, index_dtype="int64")
    for builder, node in zip((ReferenceSdpa(), ReferenceSdpaBackward()), g.nodes):
        builder.check(node, g, None)  # int64 lengths, int64 offsets
    g.tensors[g.nodes[0].op.k].set_data_type("int32")
    for builder, node in zip((ReferenceSdpa(), ReferenceSdpaBackward()), g.nodes):
        with pytest.raises(NotSupported, match=rf"node '{node.name}': port 'k' \(tensor 'k'\) is int32; sdpa"):
            builder.check(node, g, None)


def constants_of(values: dict, names=INDEX_NAMES) -> dict:
    return {n: np.asarray(values[n]) for n in names}


def test_every_placed_tensor_is_checked_once_with_its_forward_tensors_offsets(monkeypatch: pytest.MonkeyPatch):
    """Forward: q, k, v and the output o; backward: each gradient beside its forward tensor (dq by q's offsets,
    d_o by o's), the gradients as outputs."""
    from sigdnn.graph.ops import ragged

    calls = []
    real = ragged.positions
    monkeypatch.setattr(
        ragged, "positions", lambda where, name, t, *a: calls.append((name, t.name, a[-1])) or real(where, name, t, *a)
    )
    build(True, False, constants=constants_of(inputs_for(build(True, False))))
    assert sorted(calls) == sorted([
        ("q_off", "q", False), ("k_off", "k", False), ("v_off", "v", False), ("o_off", "fwd::o", True),
        ("q_off", "q", False), ("q_off", "bwd::dq", True), ("k_off", "k", False), ("k_off", "bwd::dk", True),
        ("v_off", "v", False), ("v_off", "bwd::dv", True), ("o_off", "o_in", False), ("o_off", "do", False),
    ])  # fmt: skip


def test_only_offsets_and_lengths_both_constant_are_checked_with_the_graph() -> None:
    """Hostile constant offsets beside lengths given at run (or the reverse) wait for the run."""
    values = inputs_for(build(True, False), o_off=np.array([0, 8, 0, 0]).reshape(B + 1, 1, 1, 1))
    build(True, False, constants=constants_of(values, ("q_off", "k_off", "v_off", "o_off")))
    build(True, False, constants=constants_of(values, ("lq", "lkv")))


def test_a_later_ragged_port_is_checked_past_one_not_ragged_or_too_big(monkeypatch: pytest.MonkeyPatch) -> None:
    """k and v ragged alone (q first, not ragged), or q too big for the check: k's hostile offsets still refused;
    a tensor of exactly CHECKED_AT_PREPARE elements is checked."""
    from sigdnn.graph.ops import ragged

    bad_k = {"k_off": np.array([0, 0, 200, 0]).reshape(B + 1, 1, 1, 1)}
    values = inputs_for(build(True, False, ports="kv"), **bad_k)
    with pytest.raises(GraphError, match="tensor 'k_off' places sequence"):
        build(True, False, constants=constants_of(values, ("lq", "lkv", "k_off", "v_off")), ports="kv")
    g = build(True, False)
    k_size, q_size = g.tensor_by_name("k").size, g.tensor_by_name("q").size
    assert k_size < q_size
    monkeypatch.setattr(ragged, "CHECKED_AT_PREPARE", k_size)
    values = inputs_for(g, **bad_k)
    with pytest.raises(GraphError, match="tensor 'k_off' places sequence"):
        build(True, False, constants=constants_of(values))
