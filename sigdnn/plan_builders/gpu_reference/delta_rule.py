"""GPU reference gated delta rule (gdn, kda) forward and backward: the recurrence itself, token by token.

Per sequence (bounds from cu_seqlens, read back once) and token t, on the
state h [H, K, V] (graph/ops/linear_attention.py): D = diag(a_t) h with
a = exp(g), u = beta_t (v_t - D^T k~_t), h' = D + k~_t u^T, o_t = h'^T q~_t.
The backward keeps every state of a sequence (no checkpoints: simpler, at a
state per token of memory) and walks back: from dh' (+ q~ do^T), dq~ = h' do,
du = dh'^T k~, dk~ = dh' u - D (beta du), dbeta = du . e, dv = beta du,
dD = dh' - k~ (beta du)^T, da = rowsum(h * dD), dh = diag(a) dD, dg = a da
(summed over K for gdn's per-head gate); then through the l2 norms. Each
step is whole-array float64 work on [H, K, V].
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from sigdnn.graph.graph import Graph
from sigdnn.graph.node import Node
from sigdnn.graph.ops.linear_attention import L2NORM_EPS, boundaries
from sigdnn.plan_builders.declines import decline_non_float
from sigdnn.plan_builders.gpu_reference.arrays import Array
from sigdnn.plan_builders.gpu_reference.base import Formula, GpuReferenceBuilder
from sigdnn.registry.engine_ids import IN_TREE
from sigdnn.runtime.device import Device


class Normalized:
    """q~ = scale n(q), k~ = n(k) (n: the l2 norm, or the identity), and their backward."""

    def __init__(self, q: Array, k: Array, scale: float | None, l2norm: bool) -> None:
        self.scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
        self.inv_q = self.inv_k = None
        if not l2norm:
            self.q, self.k = q * self.scale, k
            return
        self.inv_q = 1.0 / ((q * q).reduce("SUM", (2,)) + L2NORM_EPS).apply("SQRT")
        self.inv_k = 1.0 / ((k * k).reduce("SUM", (2,)) + L2NORM_EPS).apply("SQRT")
        self.q, self.k = q * self.scale * self.inv_q, k * self.inv_k

    def grads(self, dq_: Array, dk_: Array) -> tuple[Array, Array]:
        """dq, dk from the gradients of q~ and k~ (through the norm: dx = (dy - y (y . dy)) / |x|)."""
        dq = dq_ * self.scale
        if self.inv_q is None or self.inv_k is None:
            return dq, dk_
        unit_q = self.q / self.scale
        dq = (dq - unit_q * (unit_q * dq).reduce("SUM", (2,))) * self.inv_q
        dk = (dk_ - self.k * (self.k * dk_).reduce("SUM", (2,))) * self.inv_k
        return dq, dk


def _sum(x: Array, axis: int) -> Array:
    return x.reduce("SUM", (axis,), keepdims=False)


class Token:
    """Token t's per-token inputs, as [H, K] / [H, V] / [H] arrays."""

    def __init__(self, qk: Normalized, v: Array, a: Array, beta: Array, t: int) -> None:
        self.q, self.k, self.v, self.a, self.beta = qk.q.row(t), qk.k.row(t), v.row(t), a.row(t), beta.row(t)
        self.heads, self.kd, self.vd = self.q.shape[0], self.q.shape[1], self.v.shape[1]

    def column(self, x: Array) -> Array:
        """[H, K] -> [H, K, 1]."""
        return x.reshape(self.heads, self.kd, 1)

    def step(self, h: Array) -> tuple[Array, Array, Array, Array]:
        """(D, e, u, h') of the step from h."""
        decayed = h * self.column(self.a)
        err = self.v - _sum(self.column(self.k) * decayed, 1)
        u = self.beta.reshape(self.heads, 1) * err
        return decayed, err, u, decayed + self.column(self.k) * u.reshape(self.heads, 1, self.vd)

    def read(self, h: Array) -> Array:
        return _sum(self.column(self.q) * h, 1)


def _inputs(i: dict[str, Array | None], per_channel_gate: bool) -> tuple[Array, np.ndarray]:
    """(a = exp(g) as [T, H, K], the sequence bounds read back from the device)."""
    g = i["g"] if per_channel_gate else i["g"].reshape(*i["g"].shape, 1)
    a = g.broadcast_to(i["q"].shape).apply("EXP")
    cu = np.round(i["cu_seqlens"].host()).astype(np.int64)
    return a, boundaries("gated delta rule", "cu_seqlens", cu, i["q"].shape[0])


def _initial(i: dict[str, Array | None], s: int, state: tuple[int, ...]) -> Array:
    h0 = i.get("initial_state")
    return h0.row(s) if h0 is not None else Array.full(i["q"].gpu, state, 0.0)


def forward(i: dict[str, Array | None], scale: float | None, l2norm: bool, per_channel_gate: bool) -> dict:
    qk = Normalized(i["q"], i["k"], scale, l2norm)
    a, cu = _inputs(i, per_channel_gate)
    tokens, heads, kd = i["q"].shape
    state = (heads, kd, i["v"].shape[2])
    outs: list[Array | None] = [None] * tokens
    finals = []
    for s in range(len(cu) - 1):
        h = _initial(i, s, state)
        for t in range(int(cu[s]), int(cu[s + 1])):
            token = Token(qk, i["v"], a, i["beta"], t)
            h = token.step(h)[3]
            outs[t] = token.read(h)
        finals.append(h)
    return {"o": Array.stack(outs), "final_state": Array.stack(finals)}


def backward(i: dict[str, Array | None], scale: float | None, l2norm: bool, per_channel_gate: bool) -> dict:
    qk = Normalized(i["q"], i["k"], scale, l2norm)
    a, cu = _inputs(i, per_channel_gate)
    tokens, heads, kd = i["q"].shape
    state = (heads, kd, i["v"].shape[2])
    grads: dict[str, list] = {p: [None] * tokens for p in ("dq", "dk", "dv", "da", "dbeta")}
    d_initial = []
    for s in range(len(cu) - 1):
        steps = range(int(cu[s]), int(cu[s + 1]))
        before = [_initial(i, s, state)]  # the state before each token
        for t in steps[:-1]:
            before.append(Token(qk, i["v"], a, i["beta"], t).step(before[-1])[3])
        final = i.get("d_final_state")
        dh = final.row(s) if final is not None else Array.full(i["q"].gpu, state, 0.0)
        for t, h in zip(reversed(steps), reversed(before)):
            dh = _step_back(Token(qk, i["v"], a, i["beta"], t), h, dh, i["d_o"].row(t), grads, t)
        d_initial.append(dh)
    stacked = {p: Array.stack(parts) for p, parts in grads.items()}
    dq, dk = qk.grads(stacked["dq"], stacked["dk"])
    dg = stacked["da"] * a
    return {"dq": dq, "dk": dk, "dv": stacked["dv"], "dg": dg if per_channel_gate else _sum(dg, 2),
            "dbeta": stacked["dbeta"], "d_initial_state": Array.stack(d_initial)}  # fmt: skip


def _step_back(token: Token, h: Array, dh: Array, do: Array, grads: dict[str, list], t: int) -> Array:
    """Reverse mode through token t from the state h before it; returns d(h)."""
    decayed, err, u, after = token.step(h)
    heads, vd = token.heads, token.vd
    dh = dh + token.column(token.q) * do.reshape(heads, 1, vd)
    grads["dq"][t] = _sum(after * do.reshape(heads, 1, vd), 2)
    du = _sum(token.column(token.k) * dh, 1)
    dk = _sum(dh * u.reshape(heads, 1, vd), 2)
    grads["dbeta"][t] = _sum(du * err, 1)
    derr = token.beta.reshape(heads, 1) * du
    grads["dv"][t] = derr
    grads["dk"][t] = dk - _sum(decayed * derr.reshape(heads, 1, vd), 2)
    d_decayed = dh - token.column(token.k) * derr.reshape(heads, 1, vd)
    grads["da"][t] = _sum(h * d_decayed, 2)
    return d_decayed * token.column(token.a)


class _DeltaRule(GpuReferenceBuilder):
    backward: ClassVar[bool] = False

    def check(self, node: Node, graph: Graph, device: Device) -> None:
        """Floating point apart from cu_seqlens."""
        decline_non_float(node, graph, integer_ports=("cu_seqlens",))

    def formula(self, node: Node, graph: Graph) -> Formula:
        op = node.op
        run = backward if self.backward else forward
        return lambda i: run(i, op.scale, op.use_qk_l2norm, op.per_channel_gate)


class GpuReferenceGdn(_DeltaRule):
    name: ClassVar[str] = "gpu_reference.gdn"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("gdn",)


class GpuReferenceKda(_DeltaRule):
    name: ClassVar[str] = "gpu_reference.kda"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("kda",)


class GpuReferenceGdnBwd(_DeltaRule):
    name: ClassVar[str] = "gpu_reference.gdn_bwd"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("gdn_bwd",)
    backward: ClassVar[bool] = True


class GpuReferenceKdaBwd(_DeltaRule):
    name: ClassVar[str] = "gpu_reference.kda_bwd"
    engine_id: ClassVar[int] = IN_TREE[name]
    ops: ClassVar[tuple[str, ...]] = ("kda_bwd",)
    backward: ClassVar[bool] = True
