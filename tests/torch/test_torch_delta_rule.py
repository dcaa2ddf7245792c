"""torch.ops.sigdnn.gdn / kda against a token-by-token float64 torch loop: forward, gradients, variable lengths,
torch.compile, flash-linear-attention's calling convention and bad inputs."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import sigdnn.torch as st  # noqa: E402
from sigdnn.errors import ExecutionError, GraphError, SigdnnError, UsageError  # noqa: E402

gen = torch.Generator().manual_seed(35)
F64 = torch.float64


def rand(*dims: int) -> torch.Tensor:
    return torch.randn(*dims, dtype=F64, generator=gen)


def loop(kind, q, k, v, g, beta, cu, initial=None, scale=None, l2norm=False):
    """S_t = S_{t-1} diag(a_t) (I - b_t k_t k_t^T) + b_t v_t k_t^T, o_t = S_t (scale q_t), S [V, K] per sequence
    and head; a_t = exp(g_t) (one per head for gdn, per key channel for kda); states returned as S^T [K, V]."""
    heads, kd, vd = q.shape[1], q.shape[2], v.shape[2]
    scale = kd**-0.5 if scale is None else scale
    eye = torch.eye(kd, dtype=F64)
    outs, finals = [], []
    for n in range(len(cu) - 1):
        per_head = []
        for h in range(heads):
            S = torch.zeros(vd, kd, dtype=F64) if initial is None else initial[n, h].T
            for t in range(int(cu[n]), int(cu[n + 1])):
                qt, kt = q[t, h], k[t, h]
                if l2norm:
                    qt, kt = qt / torch.sqrt(qt @ qt + 1e-6), kt / torch.sqrt(kt @ kt + 1e-6)
                a = torch.exp(g[t, h]) * torch.ones(kd, dtype=F64)
                b = beta[t, h]
                S = S @ torch.diag(a) @ (eye - b * torch.outer(kt, kt)) + b * torch.outer(v[t, h], kt)
                outs.append((t, h, S @ (scale * qt)))
            per_head.append(S.T)
        finals.append(torch.stack(per_head))
    o = torch.zeros(q.shape[0], heads, vd, dtype=F64)
    o = o.index_put((torch.tensor([t for t, _, _ in outs]), torch.tensor([h for _, h, _ in outs])),
                    torch.stack([x for _, _, x in outs])) if outs else o  # fmt: skip
    return o, torch.stack(finals)


def problem(kind, lengths, heads=2, kd=3, vd=4, initial=True):
    tokens = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    gate = (tokens, heads, kd) if kind == "kda" else (tokens, heads)
    tensors = {
        "q": rand(tokens, heads, kd),
        "k": rand(tokens, heads, kd) * 0.5,
        "v": rand(tokens, heads, vd),
        "g": -torch.rand(*gate, dtype=F64, generator=gen) * 0.5,
        "beta": torch.rand(tokens, heads, dtype=F64, generator=gen),
    }
    h0 = rand(len(lengths), heads, kd, vd) if initial else None
    return tensors, cu, h0


def op(kind):
    return getattr(torch.ops.sigdnn, kind)


def close(a, b):
    torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(("lengths", "initial", "scale", "l2norm"),
                         [((3,), False, None, False), ((2, 0, 4), True, 0.7, True), ((1, 3), True, None, False)])  # fmt: skip
def test_forward_matches_the_token_loop(kind, lengths, initial, scale, l2norm):
    x, cu, h0 = problem(kind, lengths, initial=initial)
    o, final = op(kind)(*x.values(), cu, h0, scale, l2norm, True)
    expect_o, expect_final = loop(kind, *x.values(), cu, h0, scale, l2norm)
    close(o, expect_o)
    close(final, expect_final)
    assert final.dtype == F64 and o.is_contiguous() and final.is_contiguous()
    o_only, none = op(kind)(*x.values(), cu, h0, scale, l2norm, False)
    assert none is None
    close(o_only, expect_o)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(("initial", "final_used", "l2norm"), [(True, True, True), (False, False, False)])
def test_gradients_match_autograd_through_the_loop(kind, initial, final_used, l2norm):
    x, cu, h0 = problem(kind, (2, 3), initial=initial)
    mine = {p: t.clone().requires_grad_(True) for p, t in x.items()}
    theirs = {p: t.clone().requires_grad_(True) for p, t in x.items()}
    h_mine = None if h0 is None else h0.clone().requires_grad_(True)
    h_theirs = None if h0 is None else h0.clone().requires_grad_(True)
    o, final = op(kind)(*mine.values(), cu, h_mine, 0.6, l2norm, final_used)
    expect_o, expect_final = loop(kind, *theirs.values(), cu, h_theirs, 0.6, l2norm)
    d_o, d_final = rand(*o.shape), rand(*expect_final.shape)
    loss = (o * d_o).sum() + ((final * d_final).sum() if final_used else 0)
    expect = (expect_o * d_o).sum() + ((expect_final * d_final).sum() if final_used else 0)
    loss.backward()
    expect.backward()
    for port in x:
        close(mine[port].grad, theirs[port].grad)
    if initial:
        close(h_mine.grad, h_theirs.grad)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_gradcheck_on_a_tiny_problem(kind):
    x, cu, h0 = problem(kind, (2, 1), heads=1, kd=2, vd=2)
    inputs = [t.requires_grad_(True) for t in (*x.values(), h0)]

    def f(q, k, v, g, beta, h):
        return op(kind)(q, k, v, g, beta, cu, h, None, True, True)

    assert torch.autograd.gradcheck(f, inputs)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_cu_seqlens_splitting_equals_one_run_per_sequence(kind):
    lengths = (3, 1, 4)
    x, cu, h0 = problem(kind, lengths)
    o, final = op(kind)(*x.values(), cu, h0, None, True, True)
    for n in range(len(lengths)):
        lo, hi = int(cu[n]), int(cu[n + 1])
        part = [t[lo:hi] for t in x.values()]
        one = torch.tensor([0, hi - lo], dtype=torch.int32)
        o_n, final_n = op(kind)(*part, one, h0[n : n + 1], None, True, True)
        close(o[lo:hi], o_n)
        close(final[n], final_n[0])


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_flash_linear_attention_convention(kind):
    """[B, T, H, D] dense batches are B sequences of T; packed ones (B = 1) follow cu_seqlens."""
    entry = st.chunk_gated_delta_rule if kind == "gdn" else st.chunk_kda
    x, cu, h0 = problem(kind, (3, 3))
    batched = {p: t.reshape(2, 3, *t.shape[1:]) for p, t in x.items()}
    o, final = entry(**batched, initial_state=h0, output_final_state=True, use_qk_l2norm_in_kernel=True)
    expect_o, expect_final = loop(kind, *x.values(), cu, h0, None, True)
    close(o, expect_o.reshape(2, 3, *expect_o.shape[1:]))
    close(final, expect_final)
    packed = {p: t[None] for p, t in x.items()}
    o_packed, none = entry(**packed, scale=0.5, cu_seqlens=torch.tensor([0, 1, 6], dtype=torch.int64))
    assert none is None
    close(o_packed[0], loop(kind, *x.values(), [0, 1, 6], None, 0.5)[0])
    with pytest.raises(UsageError, match="cu_seqlens"):
        entry(**batched, cu_seqlens=cu)
    with pytest.raises(UsageError, match="q is"):
        entry(**x)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_opcheck(kind):
    x, cu, h0 = problem(kind, (2, 1))
    cases = (
        (*x.values(), cu, h0, 0.5, True, True),
        (*x.values(), cu, h0.float(), 0.5, True, True),  # final_state takes the initial state's dtype
        (*x.values(), cu, None, None, False, True),
        (*x.values(), cu, None, None, False, False),
    )
    for args in cases:
        results = torch.library.opcheck(op(kind).default, args)
        assert all(v == "SUCCESS" for v in results.values())


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_compile_fullgraph_forward_and_backward(kind):
    torch._dynamo.reset()
    x, cu, h0 = problem(kind, (2, 3))

    def layer(q, k, v, g, beta, h):
        o, final = op(kind)(q, k, v, g, beta, cu, h, None, True, True)
        return (o * o).sum() + final.sum()

    leaves = [t.clone().requires_grad_(True) for t in (*x.values(), h0)]
    eager = [t.clone().requires_grad_(True) for t in (*x.values(), h0)]
    explained = torch._dynamo.explain(layer)(*leaves)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(layer, fullgraph=True, backend="aot_eager")
    loss = compiled(*leaves)
    loss.backward()
    expect = layer(*eager)
    expect.backward()
    close(loss, expect)
    for mine, theirs in zip(leaves, eager):
        close(mine.grad, theirs.grad)


def test_graphs_are_cached_per_signature_and_optional_ports():
    x, cu, h0 = problem("gdn", (2, 2))
    torch.ops.sigdnn.gdn(*x.values(), cu, h0, None, False, True)
    before = st.cache_size()
    torch.ops.sigdnn.gdn(*(t * 2 for t in x.values()), cu, h0, None, False, True)
    assert st.cache_size() == before
    torch.ops.sigdnn.gdn(*x.values(), cu, None, None, False, True)  # no initial state: a graph of its own
    torch.ops.sigdnn.gdn(*x.values(), cu, h0, 0.5, False, True)  # another scale: another
    assert st.cache_size() == before + 2


def bad(kind, **changes):
    x, cu, h0 = problem(kind, (2, 3))
    args = {**x, "cu_seqlens": cu, "initial_state": h0} | changes
    return op(kind)(*args.values(), None, False, True)


@pytest.mark.parametrize("kind", ["gdn", "kda"])
@pytest.mark.parametrize(
    ("changes", "error", "names"),
    [
        ({"q": torch.ones(5, 2, 3, dtype=torch.int32)}, GraphError, "'q'"),
        ({"k": rand(5, 2, 4)}, GraphError, "'k'"),
        ({"v": rand(4, 2, 4)}, GraphError, "'v'"),
        ({"beta": rand(5, 3)}, GraphError, "'beta'"),
        ({"g": rand(5, 2, 3, 1)}, GraphError, "'g'"),
        ({"initial_state": rand(3, 2, 3, 4)}, GraphError, "'initial_state'"),
        ({"cu_seqlens": torch.tensor([0.0, 2.0, 5.0])}, GraphError, "'cu_seqlens'"),
        ({"cu_seqlens": torch.tensor([0, 4, 2], dtype=torch.int32)}, ExecutionError, "'cu_seqlens'.*decreases"),
        ({"cu_seqlens": torch.tensor([0, 2, 4], dtype=torch.int32)}, ExecutionError, "'cu_seqlens'.*end at T = 5"),
        ({"cu_seqlens": torch.tensor([1, 2, 5], dtype=torch.int64)}, ExecutionError, "'cu_seqlens'.*start at 0"),
    ],
)
def test_bad_inputs_raise_sigdnn_errors_naming_the_argument(kind, changes, error, names):
    with pytest.raises(error, match=names):
        bad(kind, **changes)


def test_a_dtype_sigdnn_lacks_is_a_sigdnn_error():
    with pytest.raises(SigdnnError, match="complex"):
        bad("gdn", v=torch.ones(5, 2, 4, dtype=torch.complex64))


def test_cached_graphs_name_their_tensors_after_the_arguments():
    """Error messages and saved graphs name a tensor by its argument: inputs by port, outputs as the op returns."""
    from sigdnn.torch.cache import _CACHE

    x, cu, h0 = problem("kda", (2, 1), heads=3)  # heads no other test uses: graphs of this test's own
    leaves = [t.requires_grad_(True) for t in (*x.values(), h0)]
    o, final = torch.ops.sigdnn.kda(*leaves[:5], cu, leaves[5], None, False, True)
    (o.sum() + final.sum()).backward()
    graphs = {key[0]: c.plan.graph for key, c in _CACHE.items() if key[0].startswith("kda") and key[3][0][1] == 3}
    forward, backward = graphs["kda"], graphs["kda_bwd"]
    assert [t.name for t in forward.inputs] == ["q", "k", "v", "g", "beta", "cu_seqlens", "initial_state"]
    assert [t.name for t in forward.outputs] == ["o", "final_state"]
    assert [t.name for t in backward.outputs] == ["dq", "dk", "dv", "dg", "dbeta", "d_initial_state"]


@pytest.mark.parametrize("kind", ["gdn", "kda"])
def test_torchs_float32_matmul_precision_picks_the_products_compute_dtype(kind):
    """At "highest" (torch's default) the node computes in the graph's dtype; at "high" in float16 (TF32 products
    on the GPU), at "medium" in bfloat16 (bf16 operands), each in a graph of its own; the reference's result is
    the same every way (it computes in float64)."""
    from sigdnn.torch.cache import _CACHE

    x, cu, h0 = problem(kind, (3, 2))
    x = {n: t.float() for n, t in x.items()}
    h0 = h0.float()
    leaves = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    results, computes = [], []
    before = torch.get_float32_matmul_precision()
    try:
        for precision in ("highest", "high", "medium"):
            torch.set_float32_matmul_precision(precision)
            for t in leaves.values():
                t.grad = None
            o, final = op(kind)(*leaves.values(), cu, h0, None, True, True)
            o.sum().backward()
            results.append([o.detach(), final, *(t.grad for t in leaves.values())])
            for name in (kind, f"{kind}_bwd"):
                graphs = [c.plan.graph for key, c in _CACHE.items()
                          if key[0] == name and key[1][-1] == precision and key[2][2] == torch.float32]  # fmt: skip
                computes.append({str(g.compute_dtype_of(g.nodes[-1])) for g in graphs})
    finally:
        torch.set_float32_matmul_precision(before)
    assert computes == [{"float32"}] * 2 + [{"float16"}] * 2 + [{"bfloat16"}] * 2
    for exact, *others in zip(*results):
        assert all(torch.equal(exact, other) for other in others)
