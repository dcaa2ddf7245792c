"""validate's rule for attention's gradients: a device may round p and ds to the inputs' dtype before the products.

Flash attention and cuDNN do (the tensor cores take 16-bit operands): dv =
p^T d_o with p rounded, dq = ds k and dk = ds^T q with ds rounded, each term
off by at most half an ulp of the dtype. The op declares it
(``SdpaBackward.rounded_operands``) and each gradient's tolerance allows
eps / 2 * max|gradient| beside its accumulation bound (normwise, like that
bound). A NumPy flash-attention backward (float32 p and ds, rounded to the
input dtype before the products) stands in for the GPU kernel; without the
rule it fails, and a 2 % scale or a dropped causal mask must fail with it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import sigdnn
from sigdnn.accuracy.tolerances import node_tolerance
from sigdnn.dtypes import DataType, round_to
from sigdnn.graph.ops.sdpa_backward import SdpaBackward
from sigdnn.plan_builders.reference.math.sdpa import sdpa as reference_sdpa
from sigdnn.registry import NodePlan, PlanBuilder, Registry
from sigdnn.validation import random_inputs, validate

EPS32 = 2.0**-23


def flash_backward(ins: dict[str, np.ndarray], scale: float, causal: bool, rounded: Any) -> dict[str, np.ndarray]:
    """dq, dk, dv as a flash-attention kernel computes them: float32 p and ds, ``rounded`` before the products."""
    q, k, v, o, do = (np.asarray(ins[n], np.float32) for n in ("q", "k", "v", "o", "d_o"))
    groups = q.shape[1] // k.shape[1]
    k, v = (np.repeat(t, groups, axis=1) for t in (k, v))
    s = np.einsum("bhid,bhjd->bhij", q, k) * np.float32(scale)
    if causal:
        s = np.where(np.arange(s.shape[3])[None, :] > np.arange(s.shape[2])[:, None], -np.inf, s)
    p = np.exp(s - np.asarray(ins["stats"], np.float32)).astype(np.float32)
    dp = np.einsum("bhid,bhjd->bhij", do, v)
    ds = (p * (dp - np.sum(do * o, axis=-1, keepdims=True))).astype(np.float32)
    p, ds = rounded(p).astype(np.float32), rounded(ds).astype(np.float32)
    dq = np.einsum("bhij,bhjd->bhid", ds, k) * np.float32(scale)
    shape = (q.shape[0], q.shape[1] // groups, groups, *k.shape[2:])
    dk = (np.einsum("bhij,bhid->bhjd", ds, q) * np.float32(scale)).reshape(shape).sum(axis=2)
    dv = np.einsum("bhij,bhid->bhjd", p, do).reshape(shape).sum(axis=2)
    return {"dq": dq, "dk": dk, "dv": dv}


class FlashSdpaBackward(PlanBuilder):
    name, engine_id, library, ops, priority = "plugin.flash_sdpa_backward", 31431, "plugin", ("sdpa_backward",), 10

    def __init__(self, round_operands: bool = True, scale_error: float = 1.0, drop_mask: bool = False) -> None:
        self.round_operands, self.scale_error, self.drop_mask = round_operands, scale_error, drop_mask

    def build(self, node: Any, graph: Any, context: Any) -> NodePlan:
        op, builder = node.op, self
        io = graph.dtype_of(graph.tensors[op.q]).numpy

        class Plan(NodePlan):
            def execute(self, buffers: Any, context: Any = None) -> None:
                grads = flash_backward(
                    buffers, op.attn_scale * builder.scale_error, op.use_causal_mask and not builder.drop_mask,
                    (lambda x: x.astype(io)) if builder.round_operands else (lambda x: x),
                )  # fmt: skip
                for port, value in grads.items():
                    buffers[port][...] = value

        return Plan()


def graph(dtype: str, hq: int, hkv: int, sq: int, skv: int, d: int, causal: bool) -> sigdnn.Graph:
    g = sigdnn.Graph("attn_bwd", io_dtype=dtype, compute_dtype="float32")
    q, o, d_o = (g.tensor(n, (2, hq, sq, d)) for n in ("q", "o", "d_o"))
    k, v = g.tensor("k", (2, hkv, skv, d)), g.tensor("v", (2, hkv, skv, d))
    stats = g.tensor("stats", (2, hq, sq, 1), dtype="float32")
    for name, t in zip(("dq", "dk", "dv"), g.sdpa_backward(q, k, v, o, d_o, stats, 1 / math.sqrt(d), None, causal)):
        t.set_output(True).set_name(name)
    return g


def training_inputs(g: sigdnn.Graph, seed: int) -> dict[str, np.ndarray]:
    """Random q, k, v, d_o; o and stats the reference forward's (p a real softmax)."""
    op = g.nodes[0].op
    ins = random_inputs(g, seed=seed)
    o, stats = reference_sdpa(
        *(ins[n].astype(np.float64) for n in ("q", "k", "v")), op.attn_scale, None, op.use_causal_mask, True
    )
    ins["o"] = round_to(o, g.dtype_of(g.tensors[op.q]))
    ins["stats"] = round_to(stats, DataType.FLOAT32)
    return ins


CASES = {
    "bf16_gqa": ("bfloat16", 4, 2, 70, 200, 32, False),
    "f16_causal": ("float16", 2, 2, 150, 150, 64, True),
    "bf16_mqa_causal": ("bfloat16", 4, 1, 90, 130, 16, True),
}


def run(name: str, seed: int = 3, **plan: Any) -> sigdnn.validation.ValidationReport:
    registry = Registry(entry_point_group=None)
    registry.register(FlashSdpaBackward(**plan))
    g = graph(*CASES[name])
    return validate(g, training_inputs(g, seed), executor=sigdnn.Executor(registry=registry))


def test_the_rule_by_hand() -> None:
    g = graph("bfloat16", 2, 1, 8, 40, 16, False)
    (node,) = g.nodes
    outs = node.op.outputs()
    half_ulp = 2.0**-7 / 2
    assert node_tolerance(g, node, outs["dq"]).reduction == 4 * math.sqrt(40) * EPS32 + half_ulp
    assert node_tolerance(g, node, outs["dv"]).reduction == 4 * math.sqrt(8 * 2) * EPS32 + half_ulp


@pytest.mark.parametrize("name", list(CASES))
def test_a_flash_kernel_rounding_p_and_ds_passes(name: str) -> None:
    report = run(name)
    assert report.passed, report.table()


@pytest.mark.parametrize("name", list(CASES))
def test_without_the_rule_rounding_fails(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(SdpaBackward, "rounded_operands", {})
    assert not run(name).passed
    assert run(name, round_operands=False).passed  # p and ds kept in float32: the accumulation bound is enough


@pytest.mark.parametrize("name", list(CASES))
def test_a_scale_two_percent_off_fails(name: str) -> None:
    assert not run(name, scale_error=1.02).passed


@pytest.mark.parametrize("name", ["f16_causal", "bf16_mqa_causal"])
def test_a_dropped_causal_mask_fails(name: str) -> None:
    assert not run(name, drop_mask=True).passed
