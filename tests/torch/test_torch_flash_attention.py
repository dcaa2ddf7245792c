"""sigdnn.torch.flash_attention (flash-attention's flash_attn_func) against attention written out in float64.

The oracle multiplies q by k itself and masks by flash-attention's rule
(the causal mask and the window aligned to the bottom-right corner: query
i of Sq sees keys i + Sk - Sq - left .. i + Sk - Sq + right); a query row
that sees no key gives 0, as flash-attention's kernels do. Outputs and the
gradients autograd gives both ways must agree to float64 rounding.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from flash_masks import assert_same_with_gradients, flash_mask  # noqa: E402

import sigdnn.torch as st  # noqa: E402
from sigdnn.errors import UsageError  # noqa: E402
from sigdnn.torch import eager  # noqa: E402

gen = torch.Generator().manual_seed(5)


def written_out(q, k, v, causal, scale, window):
    """o [B, Sq, Hq, Dv] of q [B, Sq, Hq, D] over k, v [B, Sk, Hkv, *] (kv heads repeated), in float64."""
    groups = q.shape[2] // k.shape[2]
    qh, kh, vh = q.transpose(1, 2), k.repeat_interleave(groups, 2).transpose(1, 2), v.repeat_interleave(groups, 2)
    s = qh @ kh.transpose(-1, -2) * (q.shape[-1] ** -0.5 if scale is None else scale)
    keep = flash_mask(q.shape[1], k.shape[1], causal, window)
    rows = keep.any(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(~keep, float("-inf")).masked_fill(~rows, 0.0), -1) * rows
    return (p @ vh.transpose(1, 2)).transpose(1, 2)


CASES = {
    # name: (B, Sq, Sk, heads q / kv, D, Dv, causal, scale, window)
    "square_causal": (2, 6, 6, (2, 2), 4, 4, True, None, (-1, -1)),
    "decoding_causal_gqa": (2, 3, 8, (4, 2), 8, 8, True, None, (-1, -1)),
    "mistral_sliding_window": (1, 9, 9, (2, 1), 4, 4, True, None, (3, 0)),
    "window_both_sides": (2, 5, 7, (2, 2), 4, 3, False, 0.4, (1, 2)),
    "more_queries_than_keys": (1, 7, 4, (1, 1), 4, 4, True, 0.7, (-1, -1)),  # the first three rows see no key
    "full": (1, 4, 5, (3, 1), 6, 2, False, None, (-1, -1)),
}


def bshd(b: int, s: int, h: int, d: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(b, s, h, d, dtype=dtype, generator=gen).requires_grad_(True)


@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_backward_match_attention_written_out(name: str) -> None:
    b, sq, sk, (hq, hkv), d, dv, causal, scale, window = CASES[name]
    q, k, v = bshd(b, sq, hq, d), bshd(b, sk, hkv, d), bshd(b, sk, hkv, dv)
    ours = st.flash_attention(q, k, v, softmax_scale=scale, causal=causal, window_size=window)
    twins = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    theirs = written_out(*twins, causal, scale, window)
    assert ours.shape == (b, sq, hq, dv)
    assert_same_with_gradients(ours, theirs, (q, k, v), twins, gen)


def test_float32_within_float32_rounding() -> None:
    q, k, v = (bshd(2, 6, 2, 8, torch.float32) for _ in range(3))
    ours = st.flash_attention(q, k, v, causal=True, window_size=(2, 0))
    theirs = written_out(*(t.double() for t in (q, k, v)), True, None, (2, 0))
    torch.testing.assert_close(ours.double(), theirs, rtol=1e-6, atol=1e-6)


def test_a_square_causal_call_builds_the_top_left_node_the_cute_kernel_takes() -> None:
    """flash-attention's bottom-right causal mask is the top-left one where Sq == Sk: the CuTe flash attention
    takes the node (no band beyond the causal mask), so the common case keeps the fast kernel."""
    from sigdnn.plan_builders.cute.attention import band_beyond_causal
    from sigdnn.torch.cache import _CACHE

    q, k, v = (bshd(1, 5, 2, 4) for _ in range(3))
    st.flash_attention(q, k, v, causal=True)
    st.flash_attention(q, k[:, :3], v[:, :3], causal=True)
    found = {c.plan.graph.tensors[c.plan.graph.nodes[0].op.k].dims[2]: c.plan.graph for key, c in _CACHE.items()
             if key[0] == "sdpa" and key[2][0] == (1, 2, 5, 4)}  # fmt: skip
    assert band_beyond_causal(found[5].nodes[0], found[5]) is None
    assert band_beyond_causal(found[3].nodes[0], found[3]) == "left_bound None, right_bound 0, bottom-right aligned"


def test_the_defaults_are_flash_attentions() -> None:
    """No mask, no window, 1 / sqrt(D): every key seen, on a batch with more keys than queries."""
    q, k, v = bshd(2, 3, 2, 4), bshd(2, 6, 2, 4), bshd(2, 6, 2, 4)
    torch.testing.assert_close(st.flash_attention(q, k, v), written_out(q, k, v, False, None, (-1, -1)),
                               rtol=1e-12, atol=1e-12)  # fmt: skip


def test_what_it_does_not_take_is_refused_by_name() -> None:
    q = bshd(1, 4, 2, 4)
    with pytest.raises(NotImplementedError, match="dropout_p > 0"):
        st.flash_attention(q, q, q, dropout_p=0.1)
    for name, args in (("q", (q[0], q, q)), ("k", (q, q[0], q)), ("v", (q, q, q[0]))):
        with pytest.raises(UsageError, match=rf"flash_attention: {name} must be \[B, S, H, D\], got 3-d"):
            st.flash_attention(*args)


def test_the_op_takes_the_band_and_its_entry_fills_the_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    """torch.ops.sigdnn.sdpa's band arguments default to none; its Python entry fills them in and still skips the
    dispatcher (it checks the call is plain), where a keyword sends a call through the op."""
    q, k, v = (torch.randn(1, 2, 5, 4, dtype=torch.float64, generator=gen) for _ in range(3))
    checked = []
    plain = eager.plain
    monkeypatch.setattr(eager, "plain", lambda args, positions: checked.append(len(args)) or plain(args, positions))
    short, _ = st.ops.sdpa(q, k, v, 0.5, True)
    whole, _ = st.ops.sdpa(q, k, v, 0.5, True, False, None, None)
    assert checked == [8, 8]
    by_keyword, _ = st.ops.sdpa(q, k, v, 0.5, True, left_bound=2)
    assert checked == [8, 8]
    torch.testing.assert_close(short, whole, rtol=0, atol=0)
    windowed = written_out(*(t.transpose(1, 2) for t in (q, k, v)), True, 0.5, (1, -1)).transpose(1, 2)
    torch.testing.assert_close(by_keyword, windowed, rtol=1e-12, atol=1e-12)


def test_opcheck() -> None:
    """torch's own check of the custom op with a band: schema, fake kernel against the real one, autograd."""
    q, k, v = (torch.randn(2, 2, 6, 4, dtype=torch.float64, generator=gen, requires_grad=True) for _ in range(3))
    torch.library.opcheck(torch.ops.sigdnn.sdpa.default, (q, k, v, 0.5, True, True, 3, None))


def test_compile_fullgraph_traces_without_graph_breaks() -> None:
    torch._dynamo.reset()
    q, k, v = (bshd(1, 6, 2, 4) for _ in range(3))

    def attend(q, k, v):
        return st.flash_attention(q, k, v, causal=True, window_size=(2, 0))

    explained = torch._dynamo.explain(attend)(q, k, v)
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    ours = torch.compile(attend, fullgraph=True, backend="aot_eager")(q, k, v)
    ours.sum().backward()
    twins = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    theirs = written_out(*twins, True, None, (2, 0))
    theirs.sum().backward()
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    for mine, reference in zip((q, k, v), twins):
        torch.testing.assert_close(mine.grad, reference.grad, rtol=1e-12, atol=1e-12)
