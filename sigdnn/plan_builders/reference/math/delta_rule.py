"""The gated delta rule (gdn, kda), forward and backward, token by token in float64.

The oracle is the recurrence itself (graph/ops/linear_attention.py), never a
chunked form. Arrays: q, k [T, H, K], v [T, H, V], g [T, H, K] (a gdn gate
broadcast over K), beta [T, H], cu [N + 1] int64, states [N, H, K, V].

The forward steps every sequence's j-th token together (state [n, H, K, V]
for the n sequences longer than j). The backward is reverse mode through the
same steps, one sequence at a time: it keeps every ``interval``-th state
(interval ~ sqrt(length)), recomputes the states of one segment forward from
its checkpoint, and walks the segment back, so it holds about 2 sqrt(length)
states instead of all of them.

Backward of one step (h the state before it, D = diag(a) h the decayed one,
e = v - D^T k, u = beta e, h' = D + k u^T, o = h'^T q), from dh' (the
gradient of the state after it, plus q do^T) and do: dq = h' do,
du = dh'^T k, dk = dh' u - D (beta du), dbeta = du . e, dv = beta du,
dD = dh' - k (beta du)^T, da = rowsum(h * dD), dh = diag(a) dD; dg = a da.
"""

from __future__ import annotations

import attrs
import numpy as np

from sigdnn.graph.ops.linear_attention import L2NORM_EPS
from sigdnn.plan_builders.reference.math.parallel import ieee


@attrs.frozen
class Normalized:
    """q~ = scale * n(q), k~ = n(k), and what their backward needs (1 / the norms; None without l2norm)."""

    q: np.ndarray
    k: np.ndarray
    inv_q: np.ndarray | None
    inv_k: np.ndarray | None
    scale: float

    @classmethod
    def of(cls, q: np.ndarray, k: np.ndarray, scale: float | None, l2norm: bool) -> Normalized:
        scale = 1 / np.sqrt(q.shape[-1]) if scale is None else scale
        if not l2norm:
            return cls(scale * q, k, None, None, scale)
        inv_q = 1 / np.sqrt(np.sum(q * q, -1, keepdims=True) + L2NORM_EPS)
        inv_k = 1 / np.sqrt(np.sum(k * k, -1, keepdims=True) + L2NORM_EPS)
        return cls(scale * q * inv_q, k * inv_k, inv_q, inv_k, scale)

    def grads(self, dq_: np.ndarray, dk_: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """dq, dk from the gradients of q~ and k~ (through the norm: dx = (dy - y (y . dy)) / |x|)."""
        dq = self.scale * dq_
        if self.inv_q is None or self.inv_k is None:
            return dq, dk_
        unit_q = self.q / self.scale
        dq = (dq - unit_q * np.sum(unit_q * dq, -1, keepdims=True)) * self.inv_q
        dk = (dk_ - self.k * np.sum(self.k * dk_, -1, keepdims=True)) * self.inv_k
        return dq, dk


def _step(h: np.ndarray, a: np.ndarray, k: np.ndarray, v: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """One token on states h [..., K, V] (a, k [..., K], v [..., V], beta [...]): the state after it (new array)."""
    decayed = h * a[..., :, None]
    u = beta[..., None] * (v - np.matmul(k[..., None, :], decayed)[..., 0, :])
    decayed += k[..., :, None] * u[..., None, :]
    return decayed


def _read(h: np.ndarray, q: np.ndarray) -> np.ndarray:
    """o = h^T q for states h [..., K, V] and q [..., K]."""
    return np.matmul(q[..., None, :], h)[..., 0, :]


@ieee
def delta_rule(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    beta: np.ndarray,
    cu: np.ndarray,
    initial_state: np.ndarray | None,
    scale: float | None,
    l2norm: bool,
) -> tuple[np.ndarray, np.ndarray]:
    """(o [T, H, V], final_state [N, H, K, V])."""
    tokens, heads, kd = q.shape
    vd = v.shape[2]
    n = cu.shape[0] - 1
    qk = Normalized.of(q, k, scale, l2norm)
    a = np.exp(np.broadcast_to(g, (tokens, heads, kd)))
    h = np.zeros((n, heads, kd, vd)) if initial_state is None else np.array(initial_state, dtype=np.float64)
    o = np.empty((tokens, heads, vd))
    lengths = np.diff(cu)
    for j in range(int(lengths.max(initial=0))):
        active = np.flatnonzero(lengths > j)
        t = cu[active] + j
        h[active] = _step(h[active], a[t], qk.k[t], v[t], beta[t])
        o[t] = _read(h[active], qk.q[t])
    return o, h


@ieee
def delta_rule_backward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    g: np.ndarray,
    beta: np.ndarray,
    cu: np.ndarray,
    initial_state: np.ndarray | None,
    do: np.ndarray,
    d_final_state: np.ndarray | None,
    scale: float | None,
    l2norm: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(dq, dk, dv, dg [T, H, K] (sum over K for a gdn gate), dbeta, d_initial_state [N, H, K, V])."""
    tokens, heads, kd = q.shape
    vd = v.shape[2]
    n = cu.shape[0] - 1
    qk = Normalized.of(q, k, scale, l2norm)
    a = np.exp(np.broadcast_to(g, (tokens, heads, kd)))
    grads = _Grads.zeros(tokens, heads, kd, vd)
    d_initial = np.empty((n, heads, kd, vd))
    for s in range(n):
        h0 = np.zeros((heads, kd, vd)) if initial_state is None else np.asarray(initial_state[s], dtype=np.float64)
        dh = np.zeros((heads, kd, vd)) if d_final_state is None else np.array(d_final_state[s], dtype=np.float64)
        seq = _Sequence(int(cu[s]), int(cu[s + 1]), qk, v, a, beta)
        d_initial[s] = seq.backward(h0, dh, do, grads)
    dq, dk = qk.grads(grads.dq, grads.dk)
    return dq, dk, grads.dv, grads.da * a, grads.dbeta, d_initial


@attrs.frozen
class _Grads:
    dq: np.ndarray  # gradients of q~ and k~ until Normalized.grads
    dk: np.ndarray
    dv: np.ndarray
    da: np.ndarray
    dbeta: np.ndarray

    @classmethod
    def zeros(cls, tokens: int, heads: int, kd: int, vd: int) -> _Grads:
        return cls(*(np.zeros((tokens, heads, kd)) for _ in range(2)), np.zeros((tokens, heads, vd)),
                   np.zeros((tokens, heads, kd)), np.zeros((tokens, heads)))  # fmt: skip


@attrs.frozen
class _Sequence:
    """Tokens start .. stop - 1 of one sequence, with the recurrence's per-token inputs."""

    start: int
    stop: int
    qk: Normalized
    v: np.ndarray
    a: np.ndarray
    beta: np.ndarray

    def step(self, h: np.ndarray, t: int) -> np.ndarray:
        return _step(h, self.a[t], self.qk.k[t], self.v[t], self.beta[t])

    def backward(self, h0: np.ndarray, dh: np.ndarray, do: np.ndarray, grads: _Grads) -> np.ndarray:
        """Fill the sequence's token gradients into ``grads``; returns d(initial state)."""
        length = self.stop - self.start
        interval = max(1, int(np.ceil(np.sqrt(length))))
        marks = list(range(self.start, self.stop, interval))
        saved = []  # the state before each mark
        h = h0
        for t in range(self.start, self.stop):
            if (t - self.start) % interval == 0:
                saved.append(h)
            h = self.step(h, t)
        for mark, before in zip(reversed(marks), reversed(saved)):
            end = min(mark + interval, self.stop)
            states = [before]
            for t in range(mark, end - 1):
                states.append(self.step(states[-1], t))
            for t in range(end - 1, mark - 1, -1):
                dh = self._step_back(states[t - mark], t, dh, do, grads)
        return dh

    def _step_back(self, h: np.ndarray, t: int, dh: np.ndarray, do: np.ndarray, grads: _Grads) -> np.ndarray:
        """Reverse mode through token t from the state h before it; returns d(h)."""
        a, k, q, beta = self.a[t], self.qk.k[t], self.qk.q[t], self.beta[t]
        decayed = h * a[:, :, None]
        pred = np.matmul(k[:, None, :], decayed)[:, 0, :]  # D^T k
        err = self.v[t] - pred
        u = beta[:, None] * err
        after = decayed + k[:, :, None] * u[:, None, :]
        dh = dh + q[:, :, None] * do[t][:, None, :]  # o = after^T q
        grads.dq[t] = np.matmul(after, do[t][:, :, None])[:, :, 0]
        du = np.matmul(k[:, None, :], dh)[:, 0, :]  # after = D + k u^T
        dk = np.matmul(dh, u[:, :, None])[:, :, 0]
        grads.dbeta[t] = np.sum(du * err, -1)  # u = beta (v - D^T k)
        derr = beta[:, None] * du
        grads.dv[t] = derr
        dk -= np.matmul(decayed, derr[:, :, None])[:, :, 0]
        grads.dk[t] = dk
        d_decayed = dh - k[:, :, None] * derr[:, None, :]
        grads.da[t] = np.sum(h * d_decayed, -1)  # D = diag(a) h
        return d_decayed * a[:, :, None]
