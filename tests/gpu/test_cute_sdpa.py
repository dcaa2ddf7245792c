"""The CuTe DSL flash-attention forward on a Hopper GPU, judged against the float64 reference.

Sequence lengths are awkward on purpose (not multiples of the 128-row or
128-key tiles, a single row, more queries than keys under the causal
mask), with grouped- and multi-query heads, BSHD strides and both head
dims. One run per shape pre-fills o and stats with NaN, so an element the
kernel never wrote cannot pass; planted bugs (a scale 2 % off, the wrong
kv head for a query head) must fail. Skips (with the reason) without a
GPU, without nvidia-cutlass-dsl, or on a device other than sm_90.

The judge is ``sigdnn.validate`` itself. Like cuDNN's and FlashAttention's,
the kernel rounds the probabilities p to the input dtype before P V (the
tensor cores take 16-bit operands); validation's rule for outputs that
average an input with probability weights (``Op.probability_weighted``)
allows exactly that: eps / 2 * max|v| on o.
"""

from __future__ import annotations

import attrs
import numpy as np
import pytest
from cute_skip import skip_unless_sm90

import sigdnn
from sigdnn.plan_builders.cute import sdpa as cute_sdpa
from sigdnn.validation import random_inputs

pytestmark = pytest.mark.gpu

skip_unless_sm90("the CuTe SDPA")


def _bshd(dims: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of [B, H, S, D] dims stored B, S, H, D."""
    _, h, s, d = dims
    return (s * h * d, d, h * d, 1)


def sdpa_graph(
    dtype: str,
    b: int,
    hq: int,
    hkv: int,
    sq: int,
    skv: int,
    d: int,
    causal: bool,
    stats: bool,
    bshd: bool = False,
    scale: float | None = None,
) -> sigdnn.Graph:
    g = sigdnn.Graph("attn", io_dtype=dtype, compute_dtype="float32")
    dims = {"q": (b, hq, sq, d), "k": (b, hkv, skv, d), "v": (b, hkv, skv, d)}
    ts = [g.tensor(n, dm, _bshd(dm) if bshd else None) for n, dm in dims.items()]
    o, st = g.sdpa(*ts, scale if scale is not None else d**-0.5, None, causal, stats, name="sdpa")
    o.set_output(True).set_name("o")
    if bshd:
        o.set_stride(_bshd(o.dims))
    if st is not None:
        st.set_output(True).set_name("stats")
    return g


def judge(g: sigdnn.Graph, inputs: dict[str, np.ndarray], executor: sigdnn.Executor) -> list[str]:
    """What is wrong with the device's o and stats (an empty list: nothing): validate's failing checks."""
    report = sigdnn.validate(g, inputs, executor=executor)
    steps = [f"{c.comparison.name}: {c.comparison}" for c in report.failures]
    return steps + [f"{c.name} (end to end): {c}" for c in report.outputs if not c.passed]


CASES = {
    # name: (dtype, B, Hq, Hkv, Sq, Skv, D, causal, stats, bshd)
    "tails_d128": ("bfloat16", 2, 3, 3, 200, 333, 128, False, True, False),
    "causal_gqa_d64": ("float16", 1, 8, 2, 300, 300, 64, True, True, False),
    "causal_more_queries_mqa": ("bfloat16", 1, 4, 1, 130, 77, 128, True, True, False),
    "causal_fewer_queries": ("bfloat16", 2, 2, 2, 17, 260, 64, True, True, False),
    "bshd_gqa_no_stats": ("bfloat16", 2, 4, 2, 129, 257, 64, False, False, True),
    "single_row": ("float16", 1, 2, 1, 1, 1, 128, True, True, False),
    "long_causal": ("bfloat16", 1, 2, 1, 1000, 1000, 128, True, True, False),
    "long_fp16_d128": ("float16", 1, 2, 2, 640, 1100, 128, False, True, False),
    # 9 query blocks x 32 heads = 288 tiles: more than the 132 SMs, so a persistent CTA walks several
    "many_tiles": ("bfloat16", 2, 16, 4, 1100, 200, 64, False, True, False),
    # causal without stats: the balanced persistent default; 5 query blocks (odd), BSHD
    "causal_no_stats": ("bfloat16", 2, 4, 2, 600, 600, 128, True, False, True),
    # 9 query blocks (odd: the middle one pairs with itself) x 32 heads: 160 balanced units > 132 SMs
    "many_units_causal": ("bfloat16", 2, 16, 4, 1100, 1100, 64, True, True, False),
}


@pytest.mark.parametrize("name", list(CASES))
def test_matches_the_reference(name: str) -> None:
    g = sdpa_graph(*CASES[name])
    executor = sigdnn.Executor("gpu", engine="cute.sdpa")
    assert executor.prepare(g).steps[0].builder.name == "cute.sdpa"
    assert judge(g, random_inputs(g, seed=7), executor) == []


# defaults: m128n128s2x; causal m128n128s2pbx, with stats m128n128s2
CONFIGS = ["m128n128s2", "m128n128s2x", "m128n128s3px", "m128n176s2p"]
CONFIG_CASES = ["tails_d128", "causal_gqa_d64", "long_causal", "many_tiles"]
# Balanced pairs of query blocks (causal only): odd block counts (3, 1, 9), Sq > Skv, many units.
CAUSAL_CONFIGS = ["m128n128s2pb", "m128n128s3pbx"]
CAUSAL_CONFIG_CASES = ["causal_gqa_d64", "causal_fewer_queries", "causal_more_queries_mqa", "many_units_causal"]
CONFIG_PAIRS = [(n, c) for n in CONFIG_CASES for c in CONFIGS] + [
    (n, c) for n in CAUSAL_CONFIG_CASES for c in CAUSAL_CONFIGS
]


@pytest.mark.parametrize(("name", "config"), CONFIG_PAIRS)
def test_every_config_validates(name: str, config: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGDNN_CUTE_SDPA", config)
    g = sdpa_graph(*CASES[name])
    executor = sigdnn.Executor("gpu", engine="cute.sdpa")
    assert executor.prepare(g).steps[0].plan.config.label == config
    assert judge(g, random_inputs(g, seed=9), executor) == []


@pytest.mark.parametrize("name", ["tails_d128", "causal_gqa_d64", "bshd_gqa_no_stats", "causal_no_stats"])
def test_writes_every_output_element(name: str) -> None:
    """o and stats pre-filled with NaN (in the graph's layout) come back finite everywhere."""
    torch = pytest.importorskip("torch")
    g = sdpa_graph(*CASES[name])
    executor = sigdnn.Executor("gpu", engine="cute.sdpa")
    plan = executor.prepare(g)
    outs = {}
    for t in g.outputs:
        span = sum((e - 1) * s for e, s in zip(t.dims, t.strides, strict=True)) + 1
        storage = torch.full((span,), float("nan"), dtype=getattr(torch, str(g.dtype_of(t))), device="cuda")
        outs[t.name] = torch.as_strided(storage, t.dims, t.strides)
    executor.execute(plan, {**random_inputs(g, seed=3), **outs}, to_host=False)
    torch.cuda.synchronize()
    for out_name, x in outs.items():
        assert bool(torch.isfinite(x).all()), f"{out_name}: {int((~torch.isfinite(x)).sum())} elements not written"


@pytest.mark.parametrize("name", ["tails_d128", "bshd_gqa_no_stats"])
def test_a_planted_wrong_scale_fails(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """attn_scale 2 % off: the judge sees it, with stats and from o alone."""
    real = cute_sdpa.plan_sdpa

    def off_by_two_percent(*args):
        *head, scale, causal = args
        return real(*head, scale * 1.02, causal)

    monkeypatch.setattr(cute_sdpa, "plan_sdpa", off_by_two_percent)
    g = sdpa_graph(*CASES[name])
    assert judge(g, random_inputs(g, seed=7), sigdnn.Executor("gpu", engine="cute.sdpa")) != []


def test_a_planted_wrong_kv_head_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every query head reading kv head 0 (groups = all heads), o only: the judge sees it."""
    real = cute_sdpa.plan_sdpa

    def one_kv_head(*args):
        spec, problem = real(*args)
        return spec, attrs.evolve(problem, kv_heads=1)

    monkeypatch.setattr(cute_sdpa, "plan_sdpa", one_kv_head)
    g = sdpa_graph(*CASES["bshd_gqa_no_stats"])
    wrong = judge(g, random_inputs(g, seed=7), sigdnn.Executor("gpu", engine="cute.sdpa"))
    assert wrong and wrong[0].startswith("o:"), wrong


def test_large_scores_stay_finite() -> None:
    """Scores in the hundreds (scale 1, q and k scaled up): the running max keeps exp2 in range."""
    g = sdpa_graph("bfloat16", 1, 2, 2, 150, 300, 64, False, True, scale=1.0)
    inputs = {n: (x * 4).astype(x.dtype) for n, x in random_inputs(g, seed=11).items()}
    assert judge(g, inputs, sigdnn.Executor("gpu", engine="cute.sdpa")) == []
