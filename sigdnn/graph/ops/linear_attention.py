"""What the gated delta rule ops (gdn, gdn_bwd, kda, kda_bwd) share: ports, shape rules, sequence checks.

Token-packed tensors: q, k [T, H, K], v [T, H, V], beta [T, H], the gate g
[T, H] (gdn: one decay per head) or [T, H, K] (kda: one per key channel);
``cu_seqlens`` [N + 1] (int32 or int64) holds the sequence boundaries:
sequence n is tokens cu_seqlens[n] .. cu_seqlens[n+1] - 1, so it starts at 0,
never decreases and ends at T (a dense batch of N sequences of length L is
[0, L, 2L, ..., NL]). The state of each (sequence, head) is h [K, V]
(flash-linear-attention's layout): initial_state / final_state [N, H, K, V].

Per sequence, from h = initial_state (0 when absent), for each token t:
    q~ = scale * n(q_t), k~ = n(k_t), with n(x) = x / sqrt(|x|^2 + 1e-6) under use_qk_l2norm
    (the identity otherwise); scale defaults to 1 / sqrt(K)
    h <- diag(exp(g_t)) h                      (the decay scales h's key rows: every row by one
                                                factor for gdn, row i by exp(g_t[i]) for kda)
    u = beta_t (v_t - h^T k~)                   (the delta rule's correction, read from the decayed state)
    h <- h + k~ u^T
    o_t = h^T q~
In the transposed form S = h^T [V, K]: S_t = S_{t-1} diag(a_t) (I - beta_t k k^T) + beta_t v k^T,
o_t = S_t q, a_t = exp(g_t): the decay multiplies the state on the key side before the update.
final_state is h after a sequence's last token (initial_state for an empty sequence).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from sigdnn.dtypes import DataType
from sigdnn.errors import ExecutionError, GraphError
from sigdnn.graph.ops.base import require_float
from sigdnn.graph.ops.ragged import require_index
from sigdnn.graph.ops.shapes import STATS_DTYPE, described, require_dims
from sigdnn.graph.tensor import Tensor

if TYPE_CHECKING:
    from sigdnn.graph.graph import Graph

L2NORM_EPS = 1e-6  # flash-linear-attention's l2norm epsilon, inside the square root
PER_TOKEN_WORK = 1 << 12  # the reference's fixed cost per token (its Python step), in element operations
STATE_COPIES = 6  # float64 states the reference holds besides its checkpoints (state, decayed, products)


def sequence_count(where: str, cu_seqlens: Tensor) -> int:
    if cu_seqlens.rank != 1 or cu_seqlens.dims[0] < 2:
        raise GraphError(
            f"{where}: {described('cu_seqlens', cu_seqlens)} has dims {list(cu_seqlens.dims)}; it is [N + 1]"
        )
    require_index(where, "cu_seqlens", cu_seqlens, cu_seqlens.size, "sequence boundaries")
    return cu_seqlens.dims[0] - 1


def problem_dims(where: str, inputs: Mapping[str, Tensor], per_channel_gate: bool) -> tuple[int, int, int, int, int]:
    """(T, H, K, V, N) after checking every forward input's dims."""
    for port in ("q", "k", "v"):
        t = inputs[port]
        if t.rank != 3:
            raise GraphError(f"{where}: {described(port, t)} has rank {t.rank}; it is token-packed [T, H, D]")
    q = inputs["q"]
    tokens, heads, kd = q.dims
    require_dims(where, "k", inputs["k"], q.dims, "q's [T, H, K]")
    v = inputs["v"]
    if v.dims[:2] != (tokens, heads):
        raise GraphError(f"{where}: {described('v', v)} has dims {list(v.dims)}; it is [T, H, V] with q's T, H")
    gate = (tokens, heads, kd) if per_channel_gate else (tokens, heads)
    require_dims(where, "g", inputs["g"], gate, "a decay per key channel" if per_channel_gate else "a decay per head")
    require_dims(where, "beta", inputs["beta"], (tokens, heads), "one delta-rule rate per token and head")
    n = sequence_count(where, inputs["cu_seqlens"])
    state = (n, heads, kd, v.dims[2])
    for port in ("initial_state", "d_final_state"):
        if port in inputs:
            require_dims(where, port, inputs[port], state, "one [K, V] state per sequence and head")
    return tokens, heads, kd, v.dims[2], n


def check_scale(where: str, scale: float | None) -> None:
    if scale is not None and not np.isfinite(scale):
        raise GraphError(f"{where}: scale must be finite, got {scale}")


def check_dtypes(where: str, ports: Mapping[str, Tensor]) -> None:
    require_float(where, {p: t for p, t in ports.items() if p != "cu_seqlens"})


def state_bytes(inputs: Mapping[str, Tensor]) -> int:
    """float64 bytes of one [N, H, K, V] state."""
    _, heads, kd = inputs["q"].dims
    return 8 * (inputs["cu_seqlens"].size - 1) * heads * kd * inputs["v"].dims[2]


def checkpoints(tokens: int) -> int:
    """States the reference backward keeps for a sequence of ``tokens``: one every ~sqrt(T) tokens plus a segment."""
    interval = max(1, int(np.ceil(np.sqrt(tokens))))
    return -(-tokens // interval) + interval + 1


def token_work(inputs: Mapping[str, Tensor], per_element: int) -> int:
    tokens, heads, kd = inputs["q"].dims
    return tokens * (heads * kd * inputs["v"].dims[2] * per_element + PER_TOKEN_WORK)


def boundaries(where: str, name: str, values: np.ndarray, tokens: int) -> np.ndarray:
    """cu_seqlens as int64; ExecutionError naming the tensor unless it starts at 0, never decreases, ends at T."""
    cu = np.asarray(values).astype(np.int64).reshape(-1)
    if cu[0] != 0:
        raise ExecutionError(f"{where}: tensor '{name}' (cu_seqlens) starts at {int(cu[0])}; it must start at 0")
    steps = np.diff(cu)
    if np.any(steps < 0):
        at = int(np.flatnonzero(steps < 0)[0])
        raise ExecutionError(
            f"{where}: tensor '{name}' (cu_seqlens) decreases at entry {at + 1} ({int(cu[at])} -> {int(cu[at + 1])})"
        )
    if cu[-1] != tokens:
        raise ExecutionError(
            f"{where}: tensor '{name}' (cu_seqlens) ends at {int(cu[-1])}; it must end at T = {tokens}"
        )
    return cu


def random_draw(tensors: Mapping[str, Tensor], rng: np.random.Generator, l2norm: bool) -> dict[str, np.ndarray]:
    """Validation's inputs: boundaries of random sequences, decays in (0.95, 1] (a chunk of 64 keeps about e^-1.6 of
    the state it was handed, as in trained models, so a bug in passing the state between chunks shows; decays
    down to 0.6 forget it within a chunk), beta in [0, 1), unit q and k without use_qk_l2norm (a delta rule on
    longer keys grows without bound)."""
    cu = tensors["cu_seqlens"]
    tokens, n = tensors["q"].dims[0], cu.size - 1
    cuts = np.sort(rng.integers(0, tokens + 1, size=n - 1))
    drawn = {"cu_seqlens": np.concatenate([[0], cuts, [tokens]])}
    drawn["g"] = -rng.uniform(0, 0.05, size=tensors["g"].dims)
    drawn["beta"] = rng.uniform(0, 1, size=tensors["beta"].dims)
    if not l2norm:
        for port in ("q", "k"):
            x = rng.standard_normal(tensors[port].dims)
            drawn[port] = x / np.linalg.norm(x, axis=-1, keepdims=True)
    return {p: v.astype(tensors[p].dtype.numpy) for p, v in drawn.items()}


def dtype_of(port: str, inputs: Mapping[str, Tensor]) -> DataType | None:
    """A new final_state's dtype: the initial state's (float32 without one); other outputs the graph default's."""
    if port == "final_state":
        initial = inputs.get("initial_state")
        return initial.dtype if initial is not None and initial.dtype is not None else STATS_DTYPE
    return None


def sample_inputs(graph: Graph, per_channel_gate: bool) -> dict[str, Any]:
    """The conformance sample's inputs: 2 sequences (2 and 3 tokens), 2 heads, K 3, V 2, an initial state."""
    q, k, v = graph.tensor("q", (5, 2, 3)), graph.tensor("k", (5, 2, 3)), graph.tensor("v", (5, 2, 2))
    g = graph.tensor("g", (5, 2, 3) if per_channel_gate else (5, 2), dtype="float32")
    beta = graph.tensor("beta", (5, 2))
    cu = graph.tensor("cu_seqlens", (3,), dtype="int32")
    h0 = graph.tensor("h0", (2, 2, 3, 2), dtype="float32")
    return {"q": q, "k": k, "v": v, "g": g, "beta": beta, "cu_seqlens": cu, "initial_state": h0}
