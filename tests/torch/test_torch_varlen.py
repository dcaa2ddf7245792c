"""sigdnn's variable-length attention torch op against torch's attention run on each sequence alone, in float64.

The oracle cuts every sequence out of the packed tensors and runs torch's
scaled_dot_product_attention on it (grouped heads) with flash-attention's
mask written out: the causal mask and the window aligned to the
sequence's bottom-right corner (query i of Sq sees keys up to
i + Sk - Sq), then compares outputs and the gradients autograd gives both
ways.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from flash_masks import assert_same_with_gradients, flash_mask  # noqa: E402

import sigdnn.torch as st  # noqa: E402
from sigdnn.errors import ExecutionError, UsageError  # noqa: E402

gen = torch.Generator().manual_seed(3)


def cu(lengths: list[int]) -> torch.Tensor:
    return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)


def packed(lengths: list[int], heads: int, width: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(sum(lengths), heads, width, dtype=dtype, generator=gen).requires_grad_(True)


def per_sequence(q, k, v, lq, lk, causal, scale, window=(-1, -1)):
    """torch's attention on each sequence alone, packed back token after token."""
    cq, ck, outs = cu(lq), cu(lk), []
    for b in range(len(lq)):
        qb, kb, vb = (t[s[b] : s[b + 1]].transpose(0, 1) for t, s in ((q, cq), (k, ck), (v, ck)))
        mask = flash_mask(lq[b], lk[b], causal, window)
        o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale, enable_gqa=True)
        outs.append(o.transpose(0, 1))
    return torch.cat(outs)


CASES = {
    # name: (lengths q, lengths kv, heads q / kv, D, Dv, causal, scale, window)
    "mixed_causal_gqa": ([3, 1, 5], [4, 2, 6], (4, 2), 8, 8, True, None, (-1, -1)),  # bottom-right: a key cache
    "equal_lengths_mha": ([6, 6], [6, 6], (2, 2), 4, 4, False, 0.3, (-1, -1)),
    "one_token_each_mqa": ([1, 1, 1], [1, 1, 1], (3, 1), 5, 7, True, None, (-1, -1)),
    "an_empty_sequence": ([3, 0, 2], [2, 0, 5], (2, 1), 4, 6, False, None, (-1, -1)),
    "one_sequence_causal": ([9], [9], (2, 2), 8, 4, True, 0.5, (-1, -1)),
    "sliding_window_causal": ([5, 7], [8, 7], (2, 1), 4, 4, True, None, (2, -1)),
    "window_both_sides": ([6, 4], [6, 7], (2, 2), 4, 3, False, 0.4, (1, 2)),
    "the_diagonal_key_alone": ([4, 3], [6, 3], (2, 1), 4, 4, False, None, (0, 0)),
    "window_ending_on_the_diagonal": ([5, 2], [5, 6], (1, 1), 3, 3, False, None, (0, 3)),
    "window_starting_on_the_diagonal": ([5, 2], [5, 6], (1, 1), 3, 3, False, None, (3, 0)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_forward_and_backward_match_torch_on_each_sequence(name):
    lq, lk, (hq, hkv), d, dv, causal, scale, window = CASES[name]
    q, k, v = packed(lq, hq, d), packed(lk, hkv, d), packed(lk, hkv, dv)
    ours = st.varlen_attention(q, k, v, cu(lq), cu(lk), max(lq), max(lk), softmax_scale=scale, causal=causal,
                               window_size=window)  # fmt: skip
    twins = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    theirs = per_sequence(*twins, lq, lk, causal, scale, window)
    assert ours.shape == (sum(lq), hq, dv)
    assert_same_with_gradients(ours, theirs, (q, k, v), twins, gen)


def test_a_larger_max_seqlen_than_any_sequence_changes_nothing():
    lq, lk = [3, 4], [5, 2]
    q, k, v = packed(lq, 2, 4), packed(lk, 2, 4), packed(lk, 2, 4)
    tight = st.varlen_attention(q, k, v, cu(lq), cu(lk), 4, 5, causal=True)
    roomy = st.varlen_attention(q, k, v, cu(lq), cu(lk), 16, 9, causal=True)
    torch.testing.assert_close(tight, roomy, rtol=0, atol=0)


def test_float32_within_float32_rounding():
    lq = lk = [5, 3]
    q, k, v = (packed(lq, 2, 8, torch.float32) for _ in range(3))
    ours = st.varlen_attention(q, k, v, cu(lq), cu(lk), 5, 5)
    theirs = per_sequence(*(t.double() for t in (q, k, v)), lq, lk, False, None)
    torch.testing.assert_close(ours.double(), theirs, rtol=1e-6, atol=1e-6)


def test_inconsistent_cu_seqlens_and_lengths_are_refused_by_name():
    q, k, v = packed([3, 2], 2, 4), packed([3, 2], 2, 4), packed([3, 2], 2, 4)
    with pytest.raises(UsageError, match="last cu_seqlens entry for q is 4, but q holds 5 tokens"):
        st.varlen_attention(q, k, v, torch.tensor([0, 3, 4], dtype=torch.int32), cu([3, 2]), 3, 3)
    with pytest.raises(UsageError, match="cu_seqlens_q has 3 entries, cu_seqlens_kv 2"):
        st.varlen_attention(q, k, v, cu([3, 2]), torch.tensor([0, 5], dtype=torch.int32), 3, 5)
    with pytest.raises(UsageError, match="q holds 5 tokens, more than 2 sequences of 2"):
        st.varlen_attention(q, k, v, cu([3, 2]), cu([3, 2]), 2, 3)
    with pytest.raises(UsageError, match="last cu_seqlens entry for k is 5, but k holds 4 tokens"):
        st.varlen_attention(q, k[:4], v[:4], cu([3, 2]), cu([3, 2]), 3, 3)
    with pytest.raises(UsageError, match="last cu_seqlens entry for v is 5, but v holds 4 tokens"):
        st.varlen_attention(q, k, v[:4], cu([3, 2]), cu([3, 2]), 3, 3)
    with pytest.raises(UsageError, match="k holds 5 tokens, more than 2 sequences of 2"):
        st.varlen_attention(q, k, v, cu([3, 2]), cu([3, 2]), 3, 2)
    with pytest.raises(UsageError, match="q must be token-packed"):
        st.varlen_attention(q.reshape(5, 8), k, v, cu([3, 2]), cu([3, 2]), 3, 3)
    with pytest.raises(UsageError, match="cu_seqlens_q must be a 1-d int32 / int64 tensor"):
        st.varlen_attention(q, k, v, cu([3, 2]).float(), cu([3, 2]), 3, 3)
    with pytest.raises(UsageError, match="the cu_seqlens for q start at 1, not 0"):
        st.varlen_attention(q, k, v, torch.tensor([1, 3, 5], dtype=torch.int32), cu([3, 2]), 3, 3)
    with pytest.raises(UsageError, match="max_seqlen_q 0 and max_seqlen_kv 3 must be >= 1"):
        st.varlen_attention(q, k, v, cu([3, 2]), cu([3, 2]), 0, 3)
    with pytest.raises(ExecutionError, match="holds length -1"):  # decreasing cu_seqlens
        st.varlen_attention(q, k, v, torch.tensor([0, 4, 3, 5], dtype=torch.int32), cu([1, 2, 2]), 4, 3)
    with pytest.raises(ExecutionError, match="seq_len_q"):  # a sequence longer than max_seqlen_q
        st.varlen_attention(q, k, v, cu([4, 1]), cu([3, 2]), 3, 3)


def test_opcheck():
    """torch's own check of the custom op: schema, fake kernel against the real one, autograd registration."""
    lq, lk = [2, 3], [3, 1]
    args = (packed(lq, 2, 4), packed(lk, 1, 4), packed(lk, 1, 6), cu(lq), cu(lk), 3, 3, 0.5, True)
    torch.library.opcheck(torch.ops.sigdnn.sdpa_varlen.default, args)


def test_compile_fullgraph_traces_without_graph_breaks():
    torch._dynamo.reset()
    lq, lk = [2, 3], [3, 1]
    q, k, v = packed(lq, 2, 4), packed(lk, 2, 4), packed(lk, 2, 4)

    def attend(q, k, v, cu_q, cu_k):
        return st.varlen_attention(q, k, v, cu_q, cu_k, 3, 3, causal=True)

    explained = torch._dynamo.explain(attend)(q, k, v, cu(lq), cu(lk))
    assert explained.graph_break_count == 0 and explained.graph_count == 1
    compiled = torch.compile(attend, fullgraph=True, backend="aot_eager")
    ours = compiled(q, k, v, cu(lq), cu(lk))
    ours.sum().backward()
    twins = [t.detach().clone().requires_grad_(True) for t in (q, k, v)]
    theirs = per_sequence(*twins, lq, lk, True, None)
    theirs.sum().backward()
    torch.testing.assert_close(ours, theirs, rtol=1e-12, atol=1e-12)
    for mine, reference in zip((q, k, v), twins):
        torch.testing.assert_close(mine.grad, reference.grad, rtol=1e-12, atol=1e-12)


def test_equal_query_and_key_lengths_build_the_top_left_node_the_kernels_take():
    """Where every sequence has as many queries as keys, both alignments are one diagonal: the graph is built
    top-left (what the GPU kernels mask), so flash-attention's bottom-right rule costs nothing there."""
    from sigdnn.torch import varlen
    from sigdnn.torch.cache import _CACHE

    same, other = cu([3, 5]), cu([4, 5])
    assert varlen.band(same, same, True, None, None) == (False, None, None)
    assert varlen.band(same, same.to(torch.int64), True, 2, 0) == (False, 2, 0)
    assert varlen.band(same, other, True, None, None) == (True, None, None)
    assert varlen.band(same, cu([3, 5, 1]), True, None, None) == (True, None, None)
    assert varlen.band(same, other, False, None, None) == (False, None, None)
    q, k, v = packed([3, 5], 2, 4), packed([3, 5], 2, 4), packed([3, 5], 2, 4)
    st.varlen_attention(q, k, v, same, cu([3, 5]), 5, 5, causal=True, window_size=(6, -1))  # (a window no case has)
    (graph,) = [c.plan.graph for key, c in _CACHE.items() if key[0] == "sdpa_varlen" and key[1][-2] == 7]
    op = graph.nodes[0].op
    assert (op.use_causal_mask, op.diagonal_bottom_right, op.left_bound) == (True, False, 7)
