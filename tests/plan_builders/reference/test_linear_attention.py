"""gdn / kda and their backward on the reference, against oracles written here.

Oracles: the recurrence in torch float64 with autograd (written from
docs/ops.md, independent of the reference's hand-derived backward), a
hand-worked two-token case, and central differences of the reference's own
forward for the gradients' consistency on tiny shapes.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import sigdnn
from sigdnn.errors import ExecutionError, GraphError
from sigdnn.graph import Limits
from sigdnn.plan_builders.reference.math.delta_rule import delta_rule, delta_rule_backward

torch = pytest.importorskip("torch")


def torch_recurrence(q, k, v, g, beta, cu, h0, scale, l2norm, kda):
    """(o, final) as torch tensors, step by step from the definition."""
    heads, kd, vd = q.shape[1], q.shape[2], v.shape[2]
    scale = kd**-0.5 if scale is None else scale
    outs, finals = [None] * q.shape[0], []
    for n in range(len(cu) - 1):
        h = h0[n] if h0 is not None else torch.zeros(heads, kd, vd, dtype=torch.float64)
        for t in range(int(cu[n]), int(cu[n + 1])):
            qt, kt = q[t], k[t]
            if l2norm:
                qt = qt / torch.sqrt((qt * qt).sum(-1, keepdim=True) + 1e-6)
                kt = kt / torch.sqrt((kt * kt).sum(-1, keepdim=True) + 1e-6)
            decay = torch.exp(g[t])[:, :, None] if kda else torch.exp(g[t])[:, None, None]
            h = h * decay
            u = beta[t][:, None] * (v[t] - torch.einsum("hkv,hk->hv", h, kt))
            h = h + kt[:, :, None] * u[:, None, :]
            outs[t] = torch.einsum("hkv,hk->hv", h, scale * qt)
        finals.append(h)
    return torch.stack(outs), torch.stack(finals)


def problem(rng, lengths, heads=2, kd=3, vd=4, kda=False):
    t = int(sum(lengths))
    arrays = {
        "q": rng.standard_normal((t, heads, kd)),
        "k": rng.standard_normal((t, heads, kd)) / math.sqrt(kd),
        "v": rng.standard_normal((t, heads, vd)),
        "g": -rng.uniform(0, 0.5, (t, heads, kd) if kda else (t, heads)),
        "beta": rng.uniform(0, 1, (t, heads)),
        "h0": rng.standard_normal((len(lengths), heads, kd, vd)),
        "d_o": rng.standard_normal((t, heads, vd)),
        "d_final": rng.standard_normal((len(lengths), heads, kd, vd)),
    }
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    return arrays, cu


def graph(kind, arrays, cu, with_state, with_d_final, l2norm, scale):
    g = sigdnn.Graph(kind, io_dtype="float64", compute_dtype="float64")
    t = {n: g.tensor(n, a.shape) for n, a in arrays.items() if n not in ("h0", "d_final")}
    cut = g.tensor("cu", cu.shape, dtype="int32")
    h0 = g.tensor("h0", arrays["h0"].shape) if with_state else None
    d_final = g.tensor("d_final", arrays["d_final"].shape) if with_d_final else None
    ins = (t["q"], t["k"], t["v"], t["g"], t["beta"], cut, h0)
    o, final = getattr(g, kind)(*ins, scale=scale, use_qk_l2norm=l2norm, output_final_state=True, name="fwd")
    o.set_output(True).set_name("o")
    final.set_output(True).set_name("final").set_data_type("float64")
    grads = getattr(g, f"{kind}_bwd")(*ins, t["d_o"], d_final, scale=scale, use_qk_l2norm=l2norm, name="bwd")
    for grad, name in zip(grads, ("dq", "dk", "dv", "dg", "dbeta", "dh0")):
        if grad is not None:
            grad.set_output(True).set_name(name).set_data_type("float64")
    return g


CASES = [
    # kind, lengths, initial state, d_final_state, l2norm, scale
    ("gdn", [3, 1, 5], True, True, False, None),
    ("gdn", [4, 0, 2], False, False, True, 0.7),
    ("kda", [2, 6], True, False, True, None),
    ("kda", [1], False, True, False, 1.3),
    ("kda", [0, 7, 3], True, True, True, 0.5),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_forward_and_backward_match_torch_autograd_of_the_recurrence(case) -> None:
    kind, lengths, with_state, with_d_final, l2norm, scale = case
    rng = np.random.default_rng(len(lengths) * 10 + sum(lengths))
    arrays, cu = problem(rng, lengths, kda=kind == "kda")
    g = graph(kind, arrays, cu, with_state, with_d_final, l2norm, scale)
    ex = sigdnn.Executor("reference")
    feed = {n: a for n, a in arrays.items() if any(t.name == n for t in g.inputs)}
    out = ex.execute(ex.prepare(g), {**feed, "cu": cu})
    ts = {n: torch.tensor(arrays[n], requires_grad=True) for n in ("q", "k", "v", "g", "beta", "h0")}
    h0 = ts["h0"] if with_state else None
    o, final = torch_recurrence(ts["q"], ts["k"], ts["v"], ts["g"], ts["beta"], cu, h0, scale, l2norm, kind == "kda")
    loss = (o * torch.tensor(arrays["d_o"])).sum()
    if with_d_final:
        loss = loss + (final * torch.tensor(arrays["d_final"])).sum()
    loss.backward()
    np.testing.assert_allclose(out["o"], o.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out["final"], final.detach().numpy(), rtol=1e-12, atol=1e-12)
    for name, port in (("dq", "q"), ("dk", "k"), ("dv", "v"), ("dg", "g"), ("dbeta", "beta")):
        np.testing.assert_allclose(out[name], ts[port].grad.numpy(), rtol=1e-10, atol=1e-11, err_msg=name)
    if with_state:
        np.testing.assert_allclose(out["dh0"], ts["h0"].grad.numpy(), rtol=1e-10, atol=1e-11)
    else:
        assert "dh0" not in out


def test_hand_worked_two_tokens() -> None:
    """K = V = H = 1, scale 1: h = 0 -> u = 0.5 (2 - 0) = 1, h = 1, o = 1; then h = 0.5, u = 4 - 0.25, h = 2.375."""
    q, k, v = (np.array(x, float).reshape(2, 1, 1) for x in ([1, 2], [1, 0.5], [2, 4]))
    g = np.log(np.array([1.0, 0.5])).reshape(2, 1, 1)
    beta = np.array([0.5, 1.0]).reshape(2, 1)
    o, final = delta_rule(q, k, v, g, beta, np.array([0, 2]), None, 1.0, False)
    np.testing.assert_allclose(o.reshape(-1), [1.0, 4.75], rtol=1e-15)
    np.testing.assert_allclose(final.reshape(-1), [2.375], rtol=1e-15)


@pytest.mark.parametrize("kda", [False, True])
def test_gradients_are_central_differences_of_the_forward(kda: bool) -> None:
    rng = np.random.default_rng(5)
    arrays, cu = problem(rng, [2, 3], heads=1, kd=2, vd=2, kda=kda)
    gate = arrays["g"] if kda else arrays["g"][..., None]
    names = ("q", "k", "v", "g", "beta", "h0")
    base = {n: arrays[n] for n in names}

    def loss(values) -> float:
        gg = values["g"] if kda else values["g"][..., None]
        o, final = delta_rule(values["q"], values["k"], values["v"], gg, values["beta"], cu, values["h0"], 0.8, True)
        return float(np.sum(o * arrays["d_o"]) + np.sum(final * arrays["d_final"]))

    grads = delta_rule_backward(
        base["q"], base["k"], base["v"], gate, base["beta"], cu, base["h0"], arrays["d_o"], arrays["d_final"], 0.8, True
    )
    grads = dict(zip(names, grads))
    if not kda:
        grads["g"] = grads["g"].sum(-1)
    for name in names:
        direction = rng.standard_normal(base[name].shape)
        eps = 1e-6
        up = loss({**base, name: base[name] + eps * direction})
        down = loss({**base, name: base[name] - eps * direction})
        assert math.isclose(
            (up - down) / (2 * eps), float(np.sum(grads[name] * direction)), rel_tol=1e-6, abs_tol=1e-8
        ), name


def test_a_long_sequence_through_the_checkpointed_backward() -> None:
    """300 tokens: checkpoints every 18 tokens and partial segments; against torch autograd."""
    rng = np.random.default_rng(9)
    arrays, cu = problem(rng, [300, 17], heads=1, kd=2, vd=3, kda=True)
    gate = arrays["g"]
    grads = delta_rule_backward(
        arrays["q"], arrays["k"], arrays["v"], gate, arrays["beta"], cu, None, arrays["d_o"], None, None, False
    )
    ts = {n: torch.tensor(arrays[n], requires_grad=True) for n in ("q", "k", "v", "g", "beta")}
    o, _ = torch_recurrence(ts["q"], ts["k"], ts["v"], ts["g"], ts["beta"], cu, None, None, False, True)
    (o * torch.tensor(arrays["d_o"])).sum().backward()
    for got, name in zip(grads[:5], ("q", "k", "v", "g", "beta")):
        np.testing.assert_allclose(got, ts[name].grad.numpy(), rtol=1e-9, atol=1e-10, err_msg=name)


def small_graph(kind="gdn", cu_dtype="int32", cu_dims=(3,), g_dims=None, h0_dims=None, scale=None):
    g = sigdnn.Graph("la", io_dtype="float32")
    q, k, v = g.tensor("q", (6, 2, 3)), g.tensor("k", (6, 2, 3)), g.tensor("v", (6, 2, 4))
    gate = g.tensor("g", g_dims or ((6, 2, 3) if kind == "kda" else (6, 2)))
    beta, cu = g.tensor("beta", (6, 2)), g.tensor("cu", cu_dims, dtype=cu_dtype)
    h0 = g.tensor("h0", h0_dims or (max(cu_dims[0] - 1, 1), 2, 3, 4))
    getattr(g, kind)(q, k, v, gate, beta, cu, h0, scale=scale, name="n")[0].set_output(True).set_name("o")
    return g


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ([1, 3, 6], r"tensor 'cu' \(cu_seqlens\) starts at 1; it must start at 0"),
        ([0, 4, 2], r"tensor 'cu' \(cu_seqlens\) decreases at entry 2 \(4 -> 2\)"),
        ([0, 0, 4, 2, 6], r"decreases at entry 3 \(4 -> 2\)"),  # after an empty sequence
        ([0, 3, 5], r"tensor 'cu' \(cu_seqlens\) ends at 5; it must end at T = 6"),
        ([0, 3, 7], r"ends at 7"),
    ],
)
@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_hostile_sequence_boundaries_are_execution_errors_naming_the_tensor(kind, values, message) -> None:
    g = small_graph(kind, cu_dims=(len(values),))
    ex = sigdnn.Executor("reference")
    rng = np.random.default_rng(0)
    ins = {t.name: rng.standard_normal(t.dims).astype(np.float32) for t in g.inputs if t.name != "cu"}
    with pytest.raises(ExecutionError, match=message):
        ex.execute(ex.prepare(g), {**ins, "cu": np.array(values, np.int32)})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(cu_dtype="float32"), r"port 'cu_seqlens' \(tensor 'cu'\) must be int32 or int64"),
        (dict(cu_dims=(3, 1)), r"'cu'\) has dims \[3, 1\]; it is \[N \+ 1\]"),
        (dict(cu_dims=(1,)), r"it is \[N \+ 1\]"),
        (dict(g_dims=(6, 2, 3)), r"port 'g' .* expected \[6, 2\] \(a decay per head\)"),
        (dict(kind="kda", g_dims=(6, 2)), r"port 'g' .* expected \[6, 2, 3\] \(a decay per key channel\)"),
        (dict(h0_dims=(3, 2, 3, 4)), r"port 'initial_state' .* expected \[2, 2, 3, 4\]"),
        (dict(scale=float("nan")), r"scale must be finite"),
    ],
)
def test_graph_rules(kwargs, message) -> None:
    with pytest.raises(GraphError, match=message):
        sigdnn.Executor("reference").prepare(small_graph(**kwargs))


def test_the_backward_checkpoints_count_against_the_byte_limit() -> None:
    """One sequence may hold all T tokens: its checkpointed states are the backward's scratch."""
    g = sigdnn.Graph("la", io_dtype="float16")
    t, h, kd = 4096, 4, 64
    q, v = g.tensor("q", (t, h, kd)), g.tensor("v", (t, h, kd))
    gate, beta, cu = (
        g.tensor("g", (t, h), dtype="float32"),
        g.tensor("beta", (t, h)),
        g.tensor("cu", (2,), dtype="int32"),
    )
    g.gdn_bwd(q, q, v, gate, beta, cu, None, v, name="b")[0].set_output(True)
    state = 8 * h * kd * kd
    op = g.node_by_name("b").op
    tensors = {p: g.tensors[u] for p, u in op.inputs().items()}
    assert op.scratch_bytes(tensors, Limits()) >= (64 + 64) * state  # a state every 64 tokens, one segment of 64
    with pytest.raises(GraphError, match=r"node 'b': needs \d+ bytes of scratch") as refused:
        sigdnn.Executor(limits=Limits(max_total_bytes=64 << 20)).prepare(g)
    needed = int(str(refused.value).split("makes ")[1].split(" bytes")[0])
    sigdnn.Executor(limits=Limits(max_total_bytes=needed)).prepare(g)
    with pytest.raises(GraphError, match="scratch"):
        sigdnn.Executor(limits=Limits(max_total_bytes=needed - 128 * state)).prepare(g)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_forward_without_the_final_state_gives_o_alone(kind: str) -> None:
    """The hand-worked two tokens through the executor, output_final_state off: o = [1, 4.75] and nothing else."""
    g = sigdnn.Graph(kind, io_dtype="float64", compute_dtype="float64")
    q, k, v = (g.tensor(n, (2, 1, 1)) for n in "qkv")
    gate = g.tensor("g", (2, 1, 1) if kind == "kda" else (2, 1))
    beta, cu = g.tensor("beta", (2, 1)), g.tensor("cu", (2,), dtype="int64")
    outs = getattr(g, kind)(q, k, v, gate, beta, cu, None, scale=1.0, name="n")
    outs[0].set_output(True).set_name("o")
    assert all(t is None for t in outs[1:])
    ex = sigdnn.Executor("reference")
    feed = {
        "q": np.array([1.0, 2]).reshape(2, 1, 1),
        "k": np.array([1.0, 0.5]).reshape(2, 1, 1),
        "v": np.array([2.0, 4]).reshape(2, 1, 1),
        "g": np.log(np.array([1.0, 0.5])).reshape(gate.dims),
        "beta": np.array([[0.5], [1.0]]),
        "cu": np.array([0, 2]),
    }
    out = ex.execute(ex.prepare(g), feed)
    assert set(out) == {"o"}
    np.testing.assert_allclose(out["o"].reshape(-1), [1.0, 4.75], rtol=1e-15)


@pytest.mark.parametrize("kind", ["gdn", "gdn_bwd", "kda", "kda_bwd"])
def test_the_builders_decline_an_integer_port_but_take_integer_cu_seqlens(kind: str) -> None:
    """check_graph refuses integer q first; the builders' own check still declines it for a key that carries one."""
    from sigdnn.errors import NotSupported
    from sigdnn.plan_builders.reference import linear_attention as la

    builder = {
        "gdn": la.ReferenceGdn,
        "gdn_bwd": la.ReferenceGdnBwd,
        "kda": la.ReferenceKda,
        "kda_bwd": la.ReferenceKdaBwd,
    }
    g = sigdnn.Graph("la", io_dtype="float32")
    q, k, v = g.tensor("q", (6, 2, 3)), g.tensor("k", (6, 2, 3)), g.tensor("v", (6, 2, 4))
    gate = g.tensor("g", (6, 2, 3) if kind.startswith("kda") else (6, 2))
    beta, cu = g.tensor("beta", (6, 2)), g.tensor("cu", (3,), dtype="int32")
    extra = (g.tensor("d_o", (6, 2, 4)),) if kind.endswith("bwd") else ()
    getattr(g, kind)(q, k, v, gate, beta, cu, None, *extra, name="n")[0].set_output(True)
    node = g.node_by_name("n")
    builder[kind]().check(node, g, None)  # int32 cu_seqlens passes
    k.set_data_type("int32")
    with pytest.raises(NotSupported, match=rf"node 'n': port 'k' \(tensor 'k'\) is int32; {kind} is floating"):
        builder[kind]().check(node, g, None)
