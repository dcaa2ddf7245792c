"""The CuTe DSL flash-attention backward on a Hopper GPU, judged against the float64 reference.

Inputs are what training hands the backward: q, k, v and d_o random, o and
stats the forward's own (the reference forward on the same q, k, v), so p
is a real softmax. Sequence lengths are awkward on purpose (not multiples
of the 64-row or 128-key tiles, a single row, more queries than keys and
fewer under the causal mask), with grouped- and multi-query heads, BSHD
strides, both head dims and both dtypes. One run per shape pre-fills the
gradients with NaN, so an element never written cannot pass; planted bugs
(a scale 2 % off, a dropped causal mask, every query head on kv head 0)
must fail. Skips (with the reason) without a GPU, without
nvidia-cutlass-dsl, or on a device other than sm_90.

The judge is ``sigdnn.validate`` itself. Like cuDNN's and FlashAttention's,
the kernel rounds p and ds to the input dtype before the products that
take them (the tensor cores take 16-bit operands); the op declares that
(``SdpaBackward.rounded_operands``) and validation allows half an ulp of
the dtype normwise for it.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from cute_skip import skip_unless_sm90

import sigdnn
from sigdnn.dtypes import DataType, round_to
from sigdnn.plan_builders.cute import sdpa_backward as cute_bwd
from sigdnn.plan_builders.reference.math.sdpa import sdpa as reference_sdpa
from sigdnn.validation import random_inputs

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe SDPA backward")

ENGINE = "cute.sdpa_backward"


def _bshd(dims: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of [B, H, S, D] dims stored B, S, H, D."""
    _, h, s, d = dims
    return (s * h * d, d, h * d, 1)


def backward_graph(
    dtype: str,
    b: int,
    hq: int,
    hkv: int,
    sq: int,
    skv: int,
    d: int,
    causal: bool,
    bshd: bool = False,
    scale: float | None = None,
) -> sigdnn.Graph:
    g = sigdnn.Graph("attn_bwd", io_dtype=dtype, compute_dtype="float32")
    dims = {
        "q": (b, hq, sq, d),
        "k": (b, hkv, skv, d),
        "v": (b, hkv, skv, d),
        "o": (b, hq, sq, d),
        "d_o": (b, hq, sq, d),
    }
    ts = {n: g.tensor(n, dm, _bshd(dm) if bshd else None) for n, dm in dims.items()}
    stats = g.tensor("stats", (b, hq, sq, 1), dtype="float32")
    grads = g.sdpa_backward(
        ts["q"], ts["k"], ts["v"], ts["o"], ts["d_o"], stats,
        scale if scale is not None else d**-0.5, None, causal, name="sdpa_backward",
    )  # fmt: skip
    for name, t in zip(("dq", "dk", "dv"), grads, strict=True):
        t.set_output(True).set_name(name)
        if bshd:
            t.set_stride(_bshd(t.dims))
    return g


def training_inputs(g: sigdnn.Graph, seed: int, magnify: float = 1.0) -> dict[str, np.ndarray]:
    """Random q, k, v, d_o; o and stats from the reference forward on them (p a real softmax)."""
    node = g.node_by_name("sdpa_backward")
    op = node.op
    ins = random_inputs(g, seed=seed)
    io = g.dtype_of(g.tensors[op.q])
    for name in ("q", "k"):
        ins[name] = round_to(ins[name].astype(np.float64) * magnify, io)
    o, stats = reference_sdpa(
        *(ins[n].astype(np.float64) for n in ("q", "k", "v")), op.attn_scale, None, op.use_causal_mask, True
    )
    ins["o"] = round_to(o, io)
    ins["stats"] = round_to(stats, DataType.FLOAT32)
    return ins


def judge(g: sigdnn.Graph, inputs: dict[str, np.ndarray], executor: sigdnn.Executor) -> list[str]:
    """What is wrong with the device's dq, dk and dv (an empty list: nothing): validate's failing checks."""
    report = sigdnn.validate(g, inputs, executor=executor)
    steps = [f"{c.comparison.name}: {c.comparison}" for c in report.failures]
    return steps + [f"{c.name} (end to end): {c}" for c in report.outputs if not c.passed]


CASES = {
    # name: (dtype, B, Hq, Hkv, Sq, Skv, D, causal, bshd)
    "tails_d128": ("bfloat16", 2, 3, 3, 200, 333, 128, False, False),
    "causal_gqa_d64": ("float16", 1, 8, 2, 300, 300, 64, True, False),
    "causal_more_queries_mqa": ("bfloat16", 1, 4, 1, 130, 77, 128, True, False),
    "causal_fewer_queries": ("bfloat16", 2, 2, 2, 17, 260, 64, True, False),
    "bshd_gqa": ("bfloat16", 2, 4, 2, 129, 257, 64, False, True),
    # One query row (dq of a causal single row, or of a single key, is zero by cancellation: the float32
    # difference dP - D of a correct kernel is then all there is, which a normwise bound cannot judge).
    "single_row": ("float16", 1, 2, 1, 1, 7, 128, False, False),
    "long_causal_f16_d128": ("float16", 1, 2, 1, 1000, 1000, 128, True, False),
    "long_bf16_d64": ("bfloat16", 1, 2, 2, 640, 1100, 64, False, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_the_reference(name: str) -> None:
    g = backward_graph(*CASES[name])
    executor = sigdnn.Executor("gpu", engine=ENGINE)
    assert executor.prepare(g).steps[0].builder.name == ENGINE
    assert judge(g, training_inputs(g, seed=7), executor) == []


@pytest.mark.parametrize("name", ["tails_d128", "causal_gqa_d64", "bshd_gqa"])
def test_writes_every_output_element(name: str) -> None:
    """dq, dk and dv pre-filled with NaN (in the graph's layout) come back finite everywhere."""
    torch = pytest.importorskip("torch")
    g = backward_graph(*CASES[name])
    executor = sigdnn.Executor("gpu", engine=ENGINE)
    plan = executor.prepare(g)
    outs = {}
    for t in g.outputs:
        span = sum((e - 1) * s for e, s in zip(t.dims, t.strides, strict=True)) + 1
        storage = torch.full((span,), float("nan"), dtype=getattr(torch, str(g.dtype_of(t))), device="cuda")
        outs[t.name] = torch.as_strided(storage, t.dims, t.strides)
    executor.execute(plan, {**training_inputs(g, seed=3), **outs}, to_host=False)
    torch.cuda.synchronize()
    for out_name, x in outs.items():
        assert bool(torch.isfinite(x).all()), f"{out_name}: {int((~torch.isfinite(x)).sum())} elements not written"


def test_repeated_runs_agree() -> None:
    """The dq accumulator is zeroed on every run: a second run gives what the first gave, up to the order
    of the atomic additions (a few float32 ulps before the rounding to the output dtype)."""
    g = backward_graph(*CASES["causal_gqa_d64"])
    executor = sigdnn.Executor("gpu", engine=ENGINE)
    plan = executor.prepare(g)
    inputs = training_inputs(g, seed=5)
    first, second = (executor.execute(plan, inputs) for _ in range(2))
    for name in ("dk", "dv"):  # no atomics: bit for bit
        np.testing.assert_array_equal(first[name], second[name])
    dq1, dq2 = (x["dq"].astype(np.float64) for x in (first, second))
    assert np.max(np.abs(dq1 - dq2)) <= 2.0**-9 * np.max(np.abs(dq1))


@pytest.mark.parametrize("name", ["tails_d128", "causal_gqa_d64"])
def test_a_planted_wrong_scale_fails(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """attn_scale 2 % off inside the kernels: the judge sees it."""
    real = cute_bwd.plan_sdpa_backward

    def off_by_two_percent(tensors, scale, causal):
        return real(tensors, scale * 1.02, causal)

    monkeypatch.setattr(cute_bwd, "plan_sdpa_backward", off_by_two_percent)
    g = backward_graph(*CASES[name])
    assert judge(g, training_inputs(g, seed=7), sigdnn.Executor("gpu", engine=ENGINE)) != []


def test_a_planted_dropped_causal_mask_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The causal graph run by the kernel without its mask: the judge sees it."""
    real = cute_bwd.plan_sdpa_backward

    def no_mask(tensors, scale, causal):
        spec, problem = real(tensors, scale, causal)
        return attrs.evolve(spec, causal=False), problem

    monkeypatch.setattr(cute_bwd, "plan_sdpa_backward", no_mask)
    g = backward_graph(*CASES["causal_gqa_d64"])
    assert judge(g, training_inputs(g, seed=7), sigdnn.Executor("gpu", engine=ENGINE)) != []


def test_a_planted_wrong_kv_head_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every query head on kv head 0 (one kv head's worth of groups): the judge sees it."""
    real = cute_bwd.plan_sdpa_backward

    def one_kv_head(tensors, scale, causal):
        spec, problem = real(tensors, scale, causal)
        return spec, attrs.evolve(problem, kv_heads=1)

    monkeypatch.setattr(cute_bwd, "plan_sdpa_backward", one_kv_head)
    g = backward_graph(*CASES["bshd_gqa"])
    assert judge(g, training_inputs(g, seed=7), sigdnn.Executor("gpu", engine=ENGINE)) != []


def test_large_scores_stay_finite() -> None:
    """Scores in the tens (scale 1, q and k scaled up): p = exp(s - stats) stays in range."""
    g = backward_graph("bfloat16", 1, 2, 2, 150, 300, 64, False, scale=1.0)
    assert judge(g, training_inputs(g, seed=11, magnify=2.0), sigdnn.Executor("gpu", engine=ENGINE)) == []
