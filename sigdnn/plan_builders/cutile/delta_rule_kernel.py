"""The chunked gated delta rule forward (gdn, kda) as one cuTile kernel's text.

One block per (sequence, head), grid (N, H). The block reads its sequence's
boundaries from ``cu`` on the device (no host-side chunk table, no host
sync) and walks the sequence in chunks of ``C`` tokens, carrying the state
h [K, V] in float32 from chunk to chunk. Within a chunk (rows i, j; b the
cumulative log decay from the chunk's start, b_L at its last token; k, q
after the l2 norm and scale):

    KK_ij = sum_c k_ic k_jc exp(b_ic - b_jc)    (i > j)       the decayed key products
    QK_ij = sum_c q_ic k_jc exp(b_ic - b_jc)    (i >= j)
    T = (I + diag(beta) KK)^-1                                  the WY representation:
    U = T diag(beta) V - T diag(beta) (exp(b) * K) h            each token's correction u
    O = (exp(b) * Q) h + QK U
    h <- diag(exp(b_L)) h + (exp(b_L - b) * K)^T U

Every exponent above is <= 0 (pairs i >= j only; b never increases), so no
decay overflows however strong. For gdn b is one column and the pair
factors one [C, C] matrix; for kda they are summed channel by channel.
T comes from the nilpotent series (I + N)^-1 = prod_j (I + (-N)^(2^j)),
six products for C = 64. Rows past the sequence's end read 0 (g = 0,
beta = 0, k = 0), so they leave the state and the other rows unchanged and
are not stored.
"""

from __future__ import annotations

import attrs

from sigdnn.graph.ops.linear_attention import L2NORM_EPS
from sigdnn.plan_builders.cutile.source import KernelSource

CHUNK = 64


@attrs.frozen
class DeltaRuleShape:
    heads: int
    kd: int  # K
    vd: int  # V
    per_channel: bool  # kda's gate [T, H, K]; gdn's [T, H]
    l2norm: bool
    scale: float
    initial_state: bool
    final_state: bool
    chunk: int = CHUNK
    tf32: bool = False  # the products other than the gate's cumulative sums as TF32 (a 16-bit compute dtype)

    @property
    def gate_width(self) -> int:
        """Columns of the gate and its cumulative sums: K (padded) for kda, 1 for gdn."""
        return self.kp if self.per_channel else 1

    @property
    def kp(self) -> int:
        return 1 << max(0, self.kd - 1).bit_length()

    @property
    def vp(self) -> int:
        return 1 << max(0, self.vd - 1).bit_length()


def _pair_products(s: DeltaRuleShape) -> list[str]:
    """Lines computing KK (strictly lower) and QK (lower, diagonal included) for one chunk."""
    if not s.per_channel:
        return [
            "diff = ct.where(lower, b - ct.transpose(b), 0.0)",
            "decay = ct.where(lower, ct.exp(diff), 0.0)",
            "kk = ct.where(strict, dot(kt, ct.transpose(kt), zero_cc) * decay, 0.0)",
            "qk = dot(qt, ct.transpose(kt), zero_cc) * decay",
        ]
    return [
        "kk = zero_cc",
        "qk = zero_cc",
        f"for ch in range({s.kd}):",
        *("    " + line for line in _channel()),
        "    kk = kk + ct.where(strict, kc * ct.transpose(kc) * decay, 0.0)",
        "    qk = qk + qc * ct.transpose(kc) * decay",
    ]


def _channel() -> list[str]:
    """Key channel ``ch`` of k, q and b as columns, and its pair decays (lower, diagonal included)."""
    return [
        "pick = ct.reshape(kcols == ch, (1, KP))",
        "kc = ct.sum(ct.where(pick, kt, 0.0), axis=1, keepdims=True)",
        "qc = ct.sum(ct.where(pick, qt, 0.0), axis=1, keepdims=True)",
        "bc = ct.sum(ct.where(pick, b, 0.0), axis=1, keepdims=True)",
        "decay = ct.where(lower, ct.exp(ct.where(lower, bc - ct.transpose(bc), 0.0)), 0.0)",
    ]


def _setup(s: DeltaRuleShape) -> list[str]:
    """The block's sequence (read from cu on the device and clamped to [0, T], T from q's length, so hostile
    boundaries cost at most T tokens a block; T is no constant of the text, so one kernel serves every T),
    index tiles and masks."""
    return [
        "n = ct.bid(0)",
        "head = ct.bid(1)",
        "tokens = q.shape[0] // (H * K)",
        "start = ct.minimum(ct.maximum(ct.gather(cu, n), 0), tokens)",
        "stop = ct.minimum(ct.maximum(ct.gather(cu, n + 1), start), tokens)",
        "chunks = ct.cdiv(stop - start, C)",
        "steps = ct.arange(C, dtype=ct.int32)",
        "kcols = ct.arange(KP, dtype=ct.int32)",
        "vcols = ct.arange(VP, dtype=ct.int32)",
        "kcols2 = ct.reshape(kcols, (1, KP))",
        "vcols2 = ct.reshape(vcols, (1, VP))",
        "kin2 = kcols2 < K",
        "vin2 = vcols2 < V",
        "lower = ct.reshape(steps, (C, 1)) >= ct.reshape(steps, (1, C))",
        "strict = ct.reshape(steps, (C, 1)) > ct.reshape(steps, (1, C))",
        "ones_below = ct.where(lower, 1.0, 0.0)",
        "eye = ct.where(ct.reshape(steps, (C, 1)) == ct.reshape(steps, (1, C)), 1.0, 0.0)",
        "zero_cc = ct.full((C, C), 0.0, dtype=ct.float32)",
        "last = ct.reshape(steps == C - 1, (C, 1))",
        "state_at = ((n * H + head) * K + ct.reshape(kcols, (KP, 1))) * V + vcols2",
        "state_in = (ct.reshape(kcols, (KP, 1)) < K) & vin2",
    ]


def _load(s: DeltaRuleShape) -> list[str]:
    """One chunk's rows (0 past the sequence), q and k normalized and scaled, b the cumulative log decay."""
    gate = (
        "gt = ct.astype(ct.gather(g, rows2 * (H * K) + head * K + kcols2, mask=valid2 & kin2), ct.float32)"
        if s.per_channel
        else "gt = ct.reshape(ct.astype(ct.gather(g, rows * H + head, mask=valid), ct.float32), (C, 1))"
    )
    norm = [
        f"rq = ct.rsqrt(ct.sum(qr * qr, axis=1, keepdims=True) + {L2NORM_EPS!r})",
        f"rk = ct.rsqrt(ct.sum(kr * kr, axis=1, keepdims=True) + {L2NORM_EPS!r})",
        "qn = qr * rq",
        "kt = kr * rk",
    ]
    return [
        "rows = start + chunk * C + steps",
        "valid = rows < stop",
        "rows2 = ct.reshape(rows, (C, 1))",
        "valid2 = ct.reshape(valid, (C, 1))",
        "qk_at = rows2 * (H * K) + head * K + kcols2",
        "v_at = rows2 * (H * V) + head * V + vcols2",
        "qr = ct.astype(ct.gather(q, qk_at, mask=valid2 & kin2), ct.float32)",
        "kr = ct.astype(ct.gather(k, qk_at, mask=valid2 & kin2), ct.float32)",
        "vt = ct.astype(ct.gather(v, v_at, mask=valid2 & vin2), ct.float32)",
        gate,
        "bt = ct.reshape(ct.astype(ct.gather(beta, rows * H + head, mask=valid), ct.float32), (C, 1))",
        *(norm if s.l2norm else ["qn = qr", "kt = kr"]),
        f"qt = qn * {float(s.scale)!r}",
        f"b = ct.mma(ones_below, gt, ct.full((C, {s.gate_width}), 0.0, dtype=ct.float32))",
        "b_last = ct.sum(ct.where(last, b, 0.0), axis=0, keepdims=True)",
    ]


def _wy(s: DeltaRuleShape) -> list[str]:
    """T = (I + diag(beta) KK)^-1 by the nilpotent series; kg; e = v - kg h; u = T beta e."""
    return [
        "m = kk * bt",
        "inverse = eye - m",
        "power = m",
        f"for _ in range({(s.chunk - 1).bit_length() - 1}):",
        "    power = dot(power, power, zero_cc)",
        "    inverse = dot(inverse, eye + power, zero_cc)",
        "kg = kt * ct.exp(b)",
        "e = vt - dot(kg, state, ct.full((C, VP), 0.0, dtype=ct.float32))",
        "u = dot(inverse, bt * e, ct.full((C, VP), 0.0, dtype=ct.float32))",
        "carried = kt * ct.exp(b_last - b)",
    ]


def _carry(s: DeltaRuleShape) -> str:
    """The state after the chunk."""
    rows = "KP" if s.per_channel else "1"
    return (
        f"state = state * ct.reshape(ct.exp(b_last), ({rows}, 1))"
        " + dot(ct.transpose(carried), u, ct.full((KP, VP), 0.0, dtype=ct.float32))"
    )


def _module(s: DeltaRuleShape, prefix: str, params: str, body: list[str]) -> KernelSource:
    header = [
        f"C = {s.chunk}",
        f"H = {s.heads}",
        f"K = {s.kd}",
        f"V = {s.vd}",
        f"KP = {s.kp}",
        f"VP = {s.vp}",
        "",
        "",
        "def dot(a, b, acc):",
        "    return ct.mma(ct.astype(a, ct.tfloat32), ct.astype(b, ct.tfloat32), acc)"
        if s.tf32
        else "    return ct.mma(a, b, acc)",
        "",
        "",
        "@ct.kernel",
        f"def kernel({params}):",
    ]
    return KernelSource(prefix, "\n".join([*header, *("    " + line for line in body)]) + "\n")


def _initial(s: DeltaRuleShape) -> str:
    if s.initial_state:
        return "state = ct.astype(ct.gather(h0, state_at, mask=state_in), ct.float32)"
    return "state = ct.full((KP, VP), 0.0, dtype=ct.float32)"


def forward_source(s: DeltaRuleShape) -> KernelSource:
    chunk = [
        *_load(s),
        *_pair_products(s),
        *_wy(s),
        "out = dot(qt * ct.exp(b), state, dot(qk, u, ct.full((C, VP), 0.0, dtype=ct.float32)))",
        "ct.scatter(o, v_at, ct.astype(out, o.dtype), mask=valid2 & vin2)",
        _carry(s),
    ]
    body = [
        *_setup(s),
        _initial(s),
        "for chunk in range(chunks):",
        *("    " + line for line in chunk),
        *(["ct.scatter(ht, state_at, ct.astype(state, ht.dtype), mask=state_in)"] if s.final_state else []),
    ]
    return _module(s, "delta_rule_fwd", "q, k, v, g, beta, cu, h0, o, ht", body)


def _pair_gradients(s: DeltaRuleShape) -> list[str]:
    """dq, dk, db from the gradients of KK (dkk, strictly lower) and QK (dqk, lower) through the pair decays."""
    if not s.per_channel:
        return [
            "a = dkk * decay",
            "a2 = dqk * decay",
            "dkt = dkt + dot(a, kt, zero_ck) + dot(ct.transpose(a), kt, zero_ck) + dot(ct.transpose(a2), qt, zero_ck)",
            "dqt = dqt + dot(a2, kt, zero_ck)",
            "p = dkk * kk + dqk * qk",
            "db = db + ct.sum(p, axis=1, keepdims=True) - ct.transpose(ct.sum(p, axis=0, keepdims=True))",
        ]
    return [
        f"for ch in range({s.kd}):",
        *("    " + line for line in _channel()),
        "    a = dkk * decay",
        "    a2 = dqk * decay",
        "    dkc = dot(a, kc, zero_c1) + dot(ct.transpose(a), kc, zero_c1) + dot(ct.transpose(a2), qc, zero_c1)",
        "    dqc = dot(a2, kc, zero_c1)",
        "    p = a * (kc * ct.transpose(kc)) + a2 * (qc * ct.transpose(kc))",
        "    dbc = ct.sum(p, axis=1, keepdims=True) - ct.transpose(ct.sum(p, axis=0, keepdims=True))",
        "    dkt = dkt + ct.where(pick, dkc, 0.0)",
        "    dqt = dqt + ct.where(pick, dqc, 0.0)",
        "    db = db + ct.where(pick, dbc, 0.0)",
    ]


def _unnormalized(s: DeltaRuleShape) -> list[str]:
    """dq, dk of the raw inputs from those of q~ = scale n(q) and k~ = n(k)."""
    lines = [f"dqn = dqt * {float(s.scale)!r}"]
    if not s.l2norm:
        return [*lines, "dqr = dqn", "dkr = dkt"]
    return [
        *lines,
        "dqr = (dqn - qn * ct.sum(qn * dqn, axis=1, keepdims=True)) * rq",
        "dkr = (dkt - kt * ct.sum(kt * dkt, axis=1, keepdims=True)) * rk",
    ]


def backward_source(s: DeltaRuleShape) -> KernelSource:
    """Two passes a (sequence, head): the chunks' start states forward into the workspace (slot
    start // C + n, distinct for every chunk of the batch), then the chunks in reverse, each recomputing its
    cumulative gate and WY matrix and carrying d(state) to the chunk before."""
    gw = s.gate_width
    slot = "(((start + chunk * C) // C + n) * H + head) * (KP * VP) + ct.reshape(kcols, (KP, 1)) * VP + vcols2"
    forward = [
        *_load(s),
        *_pair_products(s),
        *_wy(s),
        f"ct.scatter(saved, {slot}, ct.astype(state, saved.dtype))",
        _carry(s),
    ]
    if s.per_channel:
        db_last = (
            "db_last = ct.reshape(ct.sum(state * dstate, axis=1), (1, KP)) * ct.exp(b_last)"
            " + ct.sum(carried * dkd, axis=0, keepdims=True)"
        )
        db = "db = kg * dkg + qg * dqg - carried * dkd"
    else:
        db_last = (
            "db_last = ct.reshape(ct.sum(state * dstate), (1, 1)) * ct.exp(b_last)"
            " + ct.reshape(ct.sum(carried * dkd), (1, 1))"
        )
        db = "db = ct.sum(kg * dkg + qg * dqg - carried * dkd, axis=1, keepdims=True)"
    backward = [
        "chunk = chunks - 1 - back",
        *_load(s),
        *_pair_products(s),
        f"state = ct.gather(saved, {slot})",
        *_wy(s),
        "do = ct.astype(ct.gather(d_o, v_at, mask=valid2 & vin2), ct.float32)",
        "qg = qt * ct.exp(b)",
        "du = dot(ct.transpose(qk), do, dot(carried, dstate, zero_cv))",
        "dqk = ct.where(lower, dot(do, ct.transpose(u), zero_cc), 0.0)",
        "dqg = dot(do, ct.transpose(state), zero_ck)",
        "dkd = dot(u, ct.transpose(dstate), zero_ck)",
        db_last,
        "dy = dot(ct.transpose(inverse), du, zero_cv)",
        "dinv = dot(du, ct.transpose(bt * e), zero_cc)",
        "dm = ct.where(strict, -dot(dot(ct.transpose(inverse), dinv, zero_cc), ct.transpose(inverse), zero_cc), 0.0)",
        "dbeta = ct.sum(dm * kk, axis=1, keepdims=True) + ct.sum(dy * e, axis=1, keepdims=True)",
        "dkk = dm * bt",
        "de = bt * dy",
        "dkg = -dot(de, ct.transpose(state), zero_ck)",
        "dprev = dstate * ct.reshape(ct.exp(b_last), (" + ("KP" if s.per_channel else "1") + ", 1))",
        "dprev = dprev + dot(ct.transpose(qg), do, zero_kv) - dot(ct.transpose(kg), de, zero_kv)",
        "dkt = ct.exp(b) * dkg + ct.exp(b_last - b) * dkd",
        "dqt = ct.exp(b) * dqg",
        db,
        *_pair_gradients(s),
        "db = db + ct.where(last, db_last, 0.0)",
        f"dg_t = ct.mma(ct.transpose(ones_below), db, ct.full((C, {gw}), 0.0, dtype=ct.float32))",
        *_unnormalized(s),
        "ct.scatter(dq, qk_at, ct.astype(dqr, dq.dtype), mask=valid2 & kin2)",
        "ct.scatter(dk, qk_at, ct.astype(dkr, dk.dtype), mask=valid2 & kin2)",
        "ct.scatter(dv, v_at, ct.astype(de, dv.dtype), mask=valid2 & vin2)",
        (
            "ct.scatter(dg, qk_at, ct.astype(dg_t, dg.dtype), mask=valid2 & kin2)"
            if s.per_channel
            else "ct.scatter(dg, rows2 * H + head, ct.astype(dg_t, dg.dtype), mask=valid2)"
        ),
        "ct.scatter(dbeta_out, rows2 * H + head, ct.astype(dbeta, dbeta_out.dtype), mask=valid2)",
        "dstate = dprev",
    ]
    body = [
        *_setup(s),
        "zero_ck = ct.full((C, KP), 0.0, dtype=ct.float32)",
        "zero_cv = ct.full((C, VP), 0.0, dtype=ct.float32)",
        "zero_kv = ct.full((KP, VP), 0.0, dtype=ct.float32)",
        "zero_c1 = ct.full((C, 1), 0.0, dtype=ct.float32)",
        _initial(s),
        "for chunk in range(chunks):",
        *("    " + line for line in forward),
        (
            "dstate = ct.astype(ct.gather(dht, state_at, mask=state_in), ct.float32)"
            if s.final_state
            else "dstate = zero_kv"
        ),
        "for back in range(chunks):",
        *("    " + line for line in backward),
        *(["ct.scatter(dh0, state_at, ct.astype(dstate, dh0.dtype), mask=state_in)"] if s.initial_state else []),
    ]
    params = "q, k, v, g, beta, cu, h0, d_o, dht, dq, dk, dv, dg, dbeta_out, dh0, saved"
    return _module(s, "delta_rule_bwd", params, body)
