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
            "kk = ct.mma(kt, ct.transpose(kt), zero_cc) * decay",
            "qk = ct.mma(qt, ct.transpose(kt), zero_cc) * decay",
        ]
    return [
        "kk = zero_cc",
        "qk = zero_cc",
        f"for ch in range({s.kd}):",
        "    pick = ct.reshape(kcols == ch, (1, KP))",
        "    kc = ct.sum(ct.where(pick, kt, 0.0), axis=1, keepdims=True)",
        "    qc = ct.sum(ct.where(pick, qt, 0.0), axis=1, keepdims=True)",
        "    bc = ct.sum(ct.where(pick, b, 0.0), axis=1, keepdims=True)",
        "    decay = ct.where(lower, ct.exp(ct.where(lower, bc - ct.transpose(bc), 0.0)), 0.0)",
        "    kk = kk + kc * ct.transpose(kc) * decay",
        "    qk = qk + qc * ct.transpose(kc) * decay",
    ]


def forward_source(s: DeltaRuleShape) -> KernelSource:
    c, kp, vp = s.chunk, s.kp, s.vp
    gw = kp if s.per_channel else 1  # the gate's columns
    norm = [
        f"qt = qt * ct.rsqrt(ct.sum(qt * qt, axis=1, keepdims=True) + {L2NORM_EPS!r})",
        f"kt = kt * ct.rsqrt(ct.sum(kt * kt, axis=1, keepdims=True) + {L2NORM_EPS!r})",
    ]
    gate = (
        "gt = ct.astype(ct.gather(g, rows2 * (H * K) + head * K + kcols2, mask=valid2 & kin2), ct.float32)"
        if s.per_channel
        else "gt = ct.reshape(ct.astype(ct.gather(g, rows * H + head, mask=valid), ct.float32), (C, 1))"
    )
    load_state = (
        "state = ct.astype(ct.gather(h0, state_at, mask=state_in), ct.float32)"
        if s.initial_state
        else "state = ct.full((KP, VP), 0.0, dtype=ct.float32)"
    )
    store_state = ["ct.scatter(ht, state_at, state, mask=state_in)"] if s.final_state else []
    body = [
        "n = ct.bid(0)",
        "head = ct.bid(1)",
        "start = ct.gather(cu, n)",
        "stop = ct.gather(cu, n + 1)",
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
        load_state,
        "for chunk in range(ct.cdiv(stop - start, C)):",
        *(
            "    " + line
            for line in (
                "rows = start + chunk * C + steps",
                "valid = rows < stop",
                "rows2 = ct.reshape(rows, (C, 1))",
                "valid2 = ct.reshape(valid, (C, 1))",
                "qt = ct.astype(ct.gather(q, rows2 * (H * K) + head * K + kcols2, mask=valid2 & kin2), ct.float32)",
                "kt = ct.astype(ct.gather(k, rows2 * (H * K) + head * K + kcols2, mask=valid2 & kin2), ct.float32)",
                "vt = ct.astype(ct.gather(v, rows2 * (H * V) + head * V + vcols2, mask=valid2 & vin2), ct.float32)",
                gate,
                "bt = ct.reshape(ct.astype(ct.gather(beta, rows * H + head, mask=valid), ct.float32), (C, 1))",
                *(norm if s.l2norm else []),
                f"qt = qt * {float(s.scale)!r}",
                f"b = ct.mma(ones_below, gt, ct.full((C, {gw}), 0.0, dtype=ct.float32))",
                "b_last = ct.sum(ct.where(last, b, 0.0), axis=0, keepdims=True)",
                *_pair_products(s),
                "m = ct.where(strict, kk, 0.0) * bt",
                "inverse = eye - m",
                "power = m",
                f"for _ in range({(c - 1).bit_length() - 1}):",
                "    power = ct.mma(power, power, zero_cc)",
                "    inverse = ct.mma(inverse, eye + power, zero_cc)",
                "u = ct.mma(inverse, bt * vt, ct.full((C, VP), 0.0, dtype=ct.float32))",
                "w = ct.mma(inverse, bt * (kt * ct.exp(b)), ct.full((C, KP), 0.0, dtype=ct.float32))",
                "u = u - ct.mma(w, state, ct.full((C, VP), 0.0, dtype=ct.float32))",
                "out = ct.mma(qt * ct.exp(b), state, ct.mma(qk, u, ct.full((C, VP), 0.0, dtype=ct.float32)))",
                "ct.scatter(o, rows2 * (H * V) + head * V + vcols2, out, mask=valid2 & vin2)",
                "carried = kt * ct.exp(b_last - b)",
                "state = state * ct.reshape(ct.exp(b_last), (" + ("KP" if s.per_channel else "1") + ", 1))"
                " + ct.mma(ct.transpose(carried), u, ct.full((KP, VP), 0.0, dtype=ct.float32))",
            )
        ),
        *store_state,
    ]
    params = "q, k, v, g, beta, cu, h0, o, ht"
    header = [
        f"C = {c}",
        f"H = {s.heads}",
        f"K = {s.kd}",
        f"V = {s.vd}",
        f"KP = {kp}",
        f"VP = {vp}",
        "",
        "",
        "@ct.kernel",
        f"def kernel({params}):",
    ]
    text = "\n".join([*header, *("    " + line for line in body)]) + "\n"
    return KernelSource("delta_rule_fwd", text)
