"""The chunked gated delta rule (gdn, kda) as cuTile kernels' text: the forward in two launches, the backward in four
(kda's in five).

Within a chunk of ``C`` tokens (rows i, j; b the cumulative log decay from
the chunk's start, b_L at its last token; k, q after the l2 norm and scale):

    KK_ij = sum_c k_ic k_jc exp(b_ic - b_jc)    (i > j)       the decayed key products
    QK_ij = sum_c q_ic k_jc exp(b_ic - b_jc)    (i >= j)
    T = (I + diag(beta) KK)^-1                                  the WY representation:
    W = T diag(beta) (exp(b) * K),  U0 = T diag(beta) V         the chunk's own parts
    U = U0 - W h                                                each token's correction u
    O = (exp(b) * Q) h + QK U
    h <- diag(exp(b_L)) h + (exp(b_L - b) * K)^T U

Every exponent above is <= 0 (pairs i >= j only; b never increases), so no
decay overflows however strong. For gdn b is one column and the pair
factors one [C, C] matrix; for kda they are summed channel by channel.
T comes from recursion on halves (16 x 16 diagonal blocks inverted by
doubling, then joined up to 64 x 64: ``_inverse``). Rows past the
sequence's end read 0 (g = 0, beta = 0, k = 0), so they leave the state and
the other rows unchanged and are not stored.

The forward splits what needs no state from what does, as
flash-linear-attention's chunked kernels do: ``chunks_source`` (grid: chunk
slots x heads) forms every chunk's W and U0 at once, in parallel however
few the sequences; ``forward_source`` (grid: sequences x heads x value
blocks) walks each sequence's chunks carrying h, with only the products
that involve h (and QK) on that serial path. Chunk slot start // C + n
holds chunk 0 of sequence n (distinct for every chunk of the batch: at most
T // C + N + 1 slots); a slot's block finds its sequence by binary search
over ``cu`` on the device (no host-side chunk table, no host sync). The
backward runs the chunk kernel (keeping T), a forward walk saving each
chunk's start state (``states_source``), a reverse walk saving d(state) at
each chunk's end (``reverse_source``), then every chunk's gradients at once
(``gradients_source``); kda's pair gradients through its per-channel decays,
and its dq, dk and dg, follow in a launch of their own (``pairs_source``).
"""

from __future__ import annotations

import attrs

from sigdnn.graph.ops.linear_attention import L2NORM_EPS
from sigdnn.plan_builders.cutile.source import KernelSource

CHUNK = 64
VALUE_BLOCK = 64  # value columns a forward block carries of the state, where V allows a split


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
    search_steps: int = 1  # the chunk kernel's binary search over cu: N.bit_length() steps find any of N sequences

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

    @property
    def value_width(self) -> int:
        """Value columns of h a serial walk's block carries."""
        return self.vp // self.value_blocks

    @property
    def value_blocks(self) -> int:
        """The forward's blocks a (sequence, head), each carrying VALUE_BLOCK columns of h: more blocks on the
        serial path."""
        return max(1, self.vp // VALUE_BLOCK)


def _pair_products(s: DeltaRuleShape) -> list[str]:
    """Lines computing KK (strictly lower) and QK (lower, diagonal included) for one chunk."""
    if not s.per_channel:
        return [
            "diff = ct.where(lower, b - ct.transpose(b), 0.0)",
            "decay = ct.where(lower, ct.exp(diff), 0.0)",
            "kk = ct.where(strict, dot(kt, ct.transpose(kt), zero_cc) * decay, 0.0)",
            "qk = dot(qt, ct.transpose(kt), zero_cc) * decay",
        ]
    subs = s.chunk // SUB
    lines = [*_sub_chunk_setup(), f"zero_sc = ct.full(({SUB}, C), 0.0, dtype=ct.float32)"]
    for i in range(1, subs):
        lines += [
            *_reference(i),
            f"kk{i} = dot(ct.extract(kt, ({i}, 0), ({SUB}, KP)) * ei, ct.transpose(earlier), zero_sc)",
            f"qk{i} = dot(ct.extract(qt, ({i}, 0), ({SUB}, KP)) * ei, ct.transpose(earlier), zero_sc)",
        ]
    lines += [
        _stacked("kk", ["zero_sc", *(f"kk{i}" for i in range(1, subs))]),
        _stacked("qk", ["zero_sc", *(f"qk{i}" for i in range(1, subs))]),
        f"for t in range({SUB}):",
        *("    " + line for line in _sub_chunk_column(s)),
        "    kk = kk + ct.where(column & (sub_row > t), ct.sum(kt * partner_k * ej, axis=1, keepdims=True), 0.0)",
        "    qk = qk + ct.where(column, ct.sum(qt * partner_k * ej, axis=1, keepdims=True), 0.0)",
    ]
    return lines


SUB = 16  # kda's sub-chunk: pairs in two sub-chunks factor through a reference token, pairs in one go column-wise


def _sub_chunk_setup() -> list[str]:
    """kda's pair decays exp(b_ic - b_jc) depend on the channel, so no [C, C] decay matrix multiplies a product of
    keys. For i in sub-chunk I and j before it, exp(b_i - b_j) = exp(b_i - b_r) exp(b_r - b_j) with r the first
    token of I: both factors <= 1, each folded into its side's keys, and the block row is one MMA. The pairs
    within a sub-chunk go a column t at a time: each row's partner j = (its sub-chunk's first row) + t, its key
    and b spread over the sub-chunk's rows. No exponent is positive, as in the [C, C] form."""
    return [
        f"sub_row = ct.reshape(steps % {SUB}, (C, 1))",
        f"sub_first = ct.reshape(steps - steps % {SUB}, (C, 1))",
        f"sub_rows = ct.reshape(ct.arange({SUB}, dtype=ct.int32), (1, {SUB}, 1))",
    ]


def _reference(i: int) -> list[str]:
    """Sub-chunk ``i``'s reference b_r (its first token), ``dec`` = exp(b_r - b_j) for the rows j before it (0 from
    it on), ``earlier`` = those rows' keys decayed to it, and ``ei`` = exp(b_i - b_r) for its own rows."""
    return [
        f"ref = ct.extract(b, ({i * SUB}, 0), (1, KP))",
        f"before = ct.reshape(steps, (C, 1)) < {i * SUB}",
        "dec = ct.where(before, ct.exp(ct.where(before, ref - b, 0.0)), 0.0)",
        "earlier = kt * dec",
        f"ei = ct.exp(ct.extract(b, ({i}, 0), ({SUB}, KP)) - ref)",
    ]


def _spread(s: DeltaRuleShape, tile: str, rows: str) -> str:
    """``tile`` [C, KP] summed over each sub-chunk's rows where ``rows`` (a [1, SUB, 1] mask, or all rows when
    empty), the sum given to every row of the sub-chunk."""
    shape = f"({s.chunk // SUB}, {SUB}, KP)"
    shaped = f"ct.reshape({tile}, {shape})"
    picked = f"ct.where({rows}, {shaped}, 0.0)" if rows else shaped
    summed = f"ct.sum({picked}, axis=1, keepdims=True)"
    return f"ct.reshape(ct.broadcast_to({summed}, {shape}), (C, KP))"


def _sub_chunk_column(s: DeltaRuleShape) -> list[str]:
    """Column t of the pairs within each sub-chunk: ``column`` marks each row's partner j (a [C, C] mask), partner_k and
    partner_b its key and b, ``ej`` = exp(b_i - b_j) on the rows at or after it (0 before)."""
    return [
        "pick = sub_rows == t",
        f"partner_k = {_spread(s, 'kt', 'pick')}",
        f"partner_b = {_spread(s, 'b', 'pick')}",
        "after = sub_row >= t",
        "ej = ct.where(after, ct.exp(ct.where(after, b - partner_b, 0.0)), 0.0)",
        "column = ccols2 == sub_first + t",
    ]


def _stacked(name: str, blocks: list[str]) -> str:
    """``name`` = the row blocks stacked in order (ct.cat joins pairs of one shape)."""
    while len(blocks) > 1:
        blocks = [f"ct.cat(({a}, {b}), 0)" for a, b in zip(blocks[::2], blocks[1::2], strict=True)]
    return f"{name} = {blocks[0]}"


def _tokens(length: str) -> str:
    """T from ``length``'s first dimension: T is no constant of the text, so one kernel serves every T."""
    return f"tokens = {length}.shape[0] // (H * K)"


def _bounds(index: str) -> list[str]:
    """Sequence ``index``'s tokens [start, stop), read from cu on the device and clamped to [0, T], so hostile
    boundaries cost at most T tokens a block."""
    return [
        f"start = ct.minimum(ct.maximum(ct.gather(cu, {index}), 0), tokens)",
        f"stop = ct.minimum(ct.maximum(ct.gather(cu, {index} + 1), start), tokens)",
        "chunks = ct.cdiv(stop - start, C)",
    ]


def _indices(values: str) -> list[str]:
    """Index tiles and masks; ``values``: the block's value columns (VW of them)."""
    return [
        "steps = ct.arange(C, dtype=ct.int32)",
        "kcols = ct.arange(KP, dtype=ct.int32)",
        f"vcols = {values}",
        "kcols2 = ct.reshape(kcols, (1, KP))",
        "vcols2 = ct.reshape(vcols, (1, VW))",
        "ccols2 = ct.reshape(steps, (1, C))",
        "kin2 = kcols2 < K",
        "vin2 = vcols2 < V",
        "lower = ct.reshape(steps, (C, 1)) >= ct.reshape(steps, (1, C))",
        "ones_below = ct.where(lower, 1.0, 0.0)",
        "zero_cv = ct.full((C, VW), 0.0, dtype=ct.float32)",
    ]


def _sequence_setup(values: str, length: str = "q") -> list[str]:
    """A (sequence, head) block's sequence (T from ``length``), index tiles and its state's elements."""
    return [
        "n = ct.bid(0)",
        "head = ct.bid(1)",
        _tokens(length),
        *_bounds("n"),
        *_indices(values),
        "last = ct.reshape(steps == C - 1, (C, 1))",
        "state_at = ((n * H + head) * K + ct.reshape(kcols, (KP, 1))) * V + vcols2",
        "state_in = (ct.reshape(kcols, (KP, 1)) < K) & vin2",
    ]


def _slot_setup(s: DeltaRuleShape) -> list[str]:
    """A (chunk slot, head) block's sequence n, the last whose slot start_n // C + n is <= the block's, by
    binary search over cu; ``mine`` is 1 where the slot holds one of n's chunks (``chunk``), 0 in a gap."""
    search = [
        "mid = (n + hi) // 2",
        "first = ct.minimum(ct.maximum(ct.gather(cu, mid), 0), tokens) // C + mid",
        "n = ct.where(first <= slot, mid, n)",
        "hi = ct.where(first <= slot, hi, mid)",
    ]
    return [
        "slot = ct.bid(0)",
        "head = ct.bid(1)",
        _tokens("k"),
        "n = slot * 0",
        "hi = n + (cu.shape[0] - 1)",
        *(search * s.search_steps),
        *_bounds("n"),
        "chunk = slot - (start // C + n)",
        "mine = ct.where((chunk >= 0) & (chunk < chunks), 1, 0)",
        *_indices("ct.arange(VW, dtype=ct.int32)"),  # all of V in the chunk kernel; the gradients set theirs a block
        "zero_ck = ct.full((C, KP), 0.0, dtype=ct.float32)",
        "strict = ct.reshape(steps, (C, 1)) > ct.reshape(steps, (1, C))",
        "zero_cc = ct.full((C, C), 0.0, dtype=ct.float32)",
    ]


def _rows() -> list[str]:
    """One chunk's rows (the chunk ``chunk`` of the block's sequence) and their elements' flat positions."""
    return [
        "rows = start + chunk * C + steps",
        "valid = rows < stop",
        "rows2 = ct.reshape(rows, (C, 1))",
        "valid2 = ct.reshape(valid, (C, 1))",
        "qk_at = rows2 * (H * K) + head * K + kcols2",
        VALUE_AT,
    ]


def _keys(s: DeltaRuleShape) -> list[str]:
    """The chunk's keys (0 past the sequence; normalized) and b, the cumulative log decay from its start."""
    gate = (
        "gt = ct.astype(ct.gather(g, rows2 * (H * K) + head * K + kcols2, mask=valid2 & kin2), ct.float32)"
        if s.per_channel
        else "gt = ct.reshape(ct.astype(ct.gather(g, rows * H + head, mask=valid), ct.float32), (C, 1))"
    )
    norm = [f"rk = ct.rsqrt(ct.sum(kr * kr, axis=1, keepdims=True) + {L2NORM_EPS!r})", "kt = kr * rk"]
    return [
        "kr = ct.astype(ct.gather(k, qk_at, mask=valid2 & kin2), ct.float32)",
        *(norm if s.l2norm else ["kt = kr"]),
        gate,
        *_row_sums(s, "b", "ones_below", "gt"),
    ]


def _row_sums(s: DeltaRuleShape, name: str, ones: str, tile: str) -> list[str]:
    """``name`` = ``ones`` @ ``tile``: sums over the chunk's rows by a 0 / 1 matrix (b, the gate's cumulative sums,
    and the backward's reverse ones). gdn's [C, 1] as one float32 MMA. kda's [C, K] as two TF32 MMAs of the
    tile's high and low TF32 parts (0 and 1 are exact in TF32; each term loses about 2^-22 of itself, a float32
    sum's order): the float32 MMA runs on no tensor core, and at [C, C] x [C, K] it spilled (sm_90 cubins, kda's
    chunk kernel: 3,968 B a thread with it, 2,592 B with the two TF32 MMAs)."""
    if not s.per_channel:
        return [f"{name} = ct.mma({ones}, {tile}, ct.full((C, 1), 0.0, dtype=ct.float32))"]
    return [
        f"high = ct.astype({tile}, ct.tfloat32)",
        f"low = ct.astype({tile} - ct.astype(high, ct.float32), ct.tfloat32)",
        f"exact_ones = ct.astype({ones}, ct.tfloat32)",
        f"{name} = ct.mma(exact_ones, high, ct.mma(exact_ones, low, ct.full((C, KP), 0.0, dtype=ct.float32)))",
    ]


def _decay_to_chunk_end() -> list[str]:
    """b_L, the log decay over the whole chunk, and each key decayed from its token to the chunk's end."""
    return ["b_last = ct.sum(ct.where(last, b, 0.0), axis=0, keepdims=True)", "carried = kt * ct.exp(b_last - b)"]


def _carry(s: DeltaRuleShape) -> list[str]:
    """The state after the chunk."""
    rows = "KP" if s.per_channel else "1"
    return [
        *_decay_to_chunk_end(),
        f"state = state * ct.reshape(ct.exp(b_last), ({rows}, 1))"
        " + dot(ct.transpose(carried), u, ct.full((KP, VW), 0.0, dtype=ct.float32))",
    ]


def _queries(s: DeltaRuleShape) -> list[str]:
    """The chunk's queries, normalized and scaled."""
    norm = [f"rq = ct.rsqrt(ct.sum(qr * qr, axis=1, keepdims=True) + {L2NORM_EPS!r})", "qn = qr * rq"]
    return [
        "qr = ct.astype(ct.gather(q, qk_at, mask=valid2 & kin2), ct.float32)",
        *(norm if s.l2norm else ["qn = qr"]),
        f"qt = qn * {float(s.scale)!r}",
    ]


def _values() -> list[str]:
    return [_value_tile(), _beta()]


VALUE_AT = "v_at = rows2 * (H * V) + head * V + vcols2"  # the flat positions of the rows' values in the VW columns
OUTPUT_GRADIENT = "do = ct.astype(ct.gather(d_o, v_at, mask=valid2 & vin2), ct.float32)"  # dO in those columns


def _value_tile() -> str:
    """The chunk's values in the block's VW columns (0 past the sequence and past V)."""
    return "vt = ct.astype(ct.gather(v, v_at, mask=valid2 & vin2), ct.float32)"


def _beta() -> str:
    return "bt = ct.reshape(ct.astype(ct.gather(beta, rows * H + head, mask=valid), ct.float32), (C, 1))"


BASE = 16  # the diagonal blocks T's recursion inverts by doubling: ct.mma's smallest tile


def _zeros(size: int) -> str:
    return f"z{size} = ct.full(({size}, {size}), 0.0, dtype=ct.float32)"


def _inverse(s: DeltaRuleShape) -> list[str]:
    """T = (I + M)^-1, M = diag(beta) KK (strictly lower), by recursion on halves: [[A, 0], [L, B]]^-1 =
    [[A^-1, 0], [-B^-1 L A^-1, B^-1]]. Each 16 x 16 diagonal block's inverse by doubling within it (D_1 = I,
    D_2b = D_b - D_b (M on the lower-left b x b blocks of the 2b blocks) D_b), then the halves joined up to C:
    about 1/15 of the multiply-adds of doubling on whole C x C tiles (twelve products at C = 64), and a chain of
    small products where that was twelve dependent large ones. Every block is a true inverse, whose entries the
    delta rule bounds; the nilpotent series prod (I + (-M)^(2^j)) formed powers whose entries grow as C choose
    2^j with correlated keys, and float32 cancelled them (K = 1: outputs 10^4 off)."""
    lines = [
        "m = kk * bt",
        f"bi = ct.reshape(ct.arange({BASE}, dtype=ct.int32), ({BASE}, 1))",
        f"bj = ct.reshape(ct.arange({BASE}, dtype=ct.int32), (1, {BASE}))",
        _zeros(BASE),
    ]
    names = []
    for i in range(s.chunk // BASE):
        t = f"t{BASE}_{i}"
        lines += [f"mb = ct.extract(m, ({i}, {i}), ({BASE}, {BASE}))", f"{t} = ct.where(bi == bj, 1.0, 0.0)"]
        block = 1
        while block < BASE:
            lower_left = f"(bi // {2 * block} == bj // {2 * block}) & (bi // {block} > bj // {block})"
            lines.append(f"{t} = {t} - dot(dot({t}, ct.where({lower_left}, mb, 0.0), z{BASE}), {t}, z{BASE})")
            block *= 2
        names.append(t)
    size = BASE
    while len(names) > 1:
        if size > BASE:
            lines.append(_zeros(size))
        joined = []
        for p in range(len(names) // 2):
            a, b, t = names[2 * p], names[2 * p + 1], f"t{2 * size}_{p}"
            lower_left = f"ct.extract(m, ({2 * p + 1}, {2 * p}), ({size}, {size}))"
            lines += [
                f"below = -dot(dot({b}, {lower_left}, z{size}), {a}, z{size})",
                f"{t} = ct.cat((ct.cat(({a}, z{size}), 1), ct.cat((below, {b}), 1)), 0)",
            ]
            joined.append(t)
        names, size = joined, 2 * size
    return [*lines, f"inverse = {names[0]}"]


def _dot_body(s: DeltaRuleShape) -> list[str]:
    """The products' MMA: TF32 for a 16-bit compute dtype; for float32, three TF32 MMAs of the operands' high and
    low TF32 parts (a b = ah bh + ah bl + al bh, missing al bl: about 2^-22 of |a b|), since cuTile's float32
    MMA runs on no tensor core and its code at K = V = 128 swamps the compiler (kda's backward: ptxas past 7 GB
    and 20 minutes)."""
    if s.tf32:
        return ["    return ct.mma(ct.astype(a, ct.tfloat32), ct.astype(b, ct.tfloat32), acc)"]
    return [
        "    ah = ct.astype(a, ct.tfloat32)",
        "    bh = ct.astype(b, ct.tfloat32)",
        "    al = ct.astype(a - ct.astype(ah, ct.float32), ct.tfloat32)",
        "    bl = ct.astype(b - ct.astype(bh, ct.float32), ct.tfloat32)",
        "    return ct.mma(ah, bh, ct.mma(ah, bl, ct.mma(al, bh, acc)))",
    ]


def _module(s: DeltaRuleShape, prefix: str, params: str, body: list[str], value_width: int) -> KernelSource:
    header = [
        f"C = {s.chunk}",
        f"H = {s.heads}",
        f"K = {s.kd}",
        f"V = {s.vd}",
        f"KP = {s.kp}",
        f"VP = {s.vp}",
        f"VW = {value_width}",
        "",
        "",
        "def dot(a, b, acc):",
        *_dot_body(s),
        "",
        "",
        "@ct.kernel",
        f"def kernel({params}):",
    ]
    return KernelSource(prefix, "\n".join([*header, *("    " + line for line in body)]) + "\n")


def _initial(s: DeltaRuleShape) -> str:
    if s.initial_state:
        return "state = ct.astype(ct.gather(h0, state_at, mask=state_in), ct.float32)"
    return "state = ct.full((KP, VW), 0.0, dtype=ct.float32)"


def chunk_slots(s: DeltaRuleShape, tokens: int, sequences: int) -> int:
    """Chunk slots start // C + n of every chunk of the batch, gaps included: at most T // C + N + 1."""
    return tokens // s.chunk + sequences + 1


def work_rows(s: DeltaRuleShape, tokens: int, sequences: int) -> int:
    """Rows of the chunk kernel's W, U0, QK (and T) workspace arrays: C for each chunk slot of each head."""
    return chunk_slots(s, tokens, sequences) * s.heads * s.chunk


def chunks_source(s: DeltaRuleShape, *, keep_inverse: bool) -> KernelSource:
    """Each chunk's W [C, KP], U0 [C, VP] and QK [C, C] (float32) into rows (slot * H + head) * C + i of w_work,
    u_work and qk_work; with ``keep_inverse`` (the backward's) T [C, C] into t_work too."""
    chunk = [
        *_rows(),
        *_queries(s),
        *_keys(s),
        *_values(),
        *_pair_products(s),
        *_inverse(s),
        _chunk_rows("slot"),
        "ct.scatter(w_work, at * KP + kcols2, dot(inverse, bt * (kt * ct.exp(b)), zero_ck))",
        "ct.scatter(u_work, at * VP + vcols2, dot(inverse, bt * vt, zero_cv))",
        "ct.scatter(qk_work, at * C + ccols2, qk)",
        *(["ct.scatter(t_work, at * C + ccols2, inverse)"] if keep_inverse else []),
    ]
    body = [
        *_slot_setup(s),
        "for _ in range(mine):",
        *("    " + line for line in chunk),
    ]
    params = "q, k, v, g, beta, cu, w_work, u_work, qk_work" + (", t_work" if keep_inverse else "")
    return _module(s, "delta_rule_chunks", params, body, s.vp)


def _chunk_rows(slot: str) -> str:
    """``at``: the workspace rows of chunk slot ``slot``'s C tokens for this head."""
    return f"at = ({slot} * H + head) * C + ct.reshape(steps, (C, 1))"


SEQUENCE_SLOT = "((start + chunk * C) // C + n)"  # a (sequence, head) block's chunk ``chunk`` as a chunk slot


def _value_block() -> str:
    """A serial walk's value columns: block bid(2) of VW."""
    return "ct.bid(2) * VW + ct.arange(VW, dtype=ct.int32)"


def forward_source(s: DeltaRuleShape) -> KernelSource:
    """The serial walk of a (sequence, head, value block): U = U0 - W h, the outputs, the state passed on."""
    chunk = [
        *_rows(),
        *_queries(s),
        *_keys(s),
        _chunk_rows(SEQUENCE_SLOT),
        *_corrections(),
        "qk = ct.gather(qk_work, at * C + ccols2)",
        "out = dot(qt * ct.exp(b), state, dot(qk, u, zero_cv))",
        "ct.scatter(o, v_at, ct.astype(out, o.dtype), mask=valid2 & vin2)",
        *_carry(s),
    ]
    body = [
        *_sequence_setup(_value_block()),
        _initial(s),
        "for chunk in range(chunks):",
        *("    " + line for line in chunk),
        *(["ct.scatter(ht, state_at, ct.astype(state, ht.dtype), mask=state_in)"] if s.final_state else []),
    ]
    return _module(s, "delta_rule_fwd", "q, k, g, cu, h0, w_work, u_work, qk_work, o, ht", body, s.value_width)


def _corrections() -> list[str]:
    """U = U0 - W h for the chunk at workspace rows ``at`` (this block's value columns)."""
    return ["u = ct.gather(u_work, at * VP + vcols2) - dot(ct.gather(w_work, at * KP + kcols2), state, zero_cv)"]


def _decay_matrix_pair_gradients() -> list[str]:
    """gdn's dq, dk, db from the gradients of KK (dkk, strictly lower) and QK (dqk, lower) through its [C, C] pair
    decays."""
    return [
        "a = dkk * decay",
        "a2 = dqk * decay",
        "dkt = dkt + dot(a, kt, zero_ck) + dot(ct.transpose(a), kt, zero_ck) + dot(ct.transpose(a2), qt, zero_ck)",
        "dqt = dqt + dot(a2, kt, zero_ck)",
        "p = dkk * kk + dqk * qk",
        "db = db + ct.sum(p, axis=1, keepdims=True) - ct.transpose(ct.sum(p, axis=0, keepdims=True))",
    ]


def _sub_chunk_pair_gradients(s: DeltaRuleShape) -> list[str]:
    """kda's dq, dk, db from the gradients of KK (dkk, strictly lower) and QK (dqk, lower) through the per-channel
    pair decays, by sub-chunks as ``_pair_products`` forms them."""
    subs = s.chunk // SUB
    lines = [f"zero_sk = ct.full(({SUB}, KP), 0.0, dtype=ct.float32)"]
    for i in range(1, subs):  # the block rows below the diagonal: the reference's own terms cancel
        lines += [
            *_reference(i),
            f"ki = ct.extract(kt, ({i}, 0), ({SUB}, KP)) * ei",
            f"qi = ct.extract(qt, ({i}, 0), ({SUB}, KP)) * ei",
            f"a = ct.where(ccols2 < {i * SUB}, ct.extract(dkk, ({i}, 0), ({SUB}, C)), 0.0)",
            f"a2 = ct.where(ccols2 < {i * SUB}, ct.extract(dqk, ({i}, 0), ({SUB}, C)), 0.0)",
            "dki = dot(a, earlier, zero_sk)",
            "dqi = dot(a2, earlier, zero_sk)",
            "dkb = dot(ct.transpose(a), ki, dot(ct.transpose(a2), qi, zero_ck))",
            f"dk{i} = dki * ei",
            f"dq{i} = dqi * ei",
            f"db{i} = dki * ki + dqi * qi",
            "dkt = dkt + dkb * dec",
            "db = db - dkb * earlier",
        ]
    return [
        *lines,
        _stacked("dkt_rows", ["zero_sk", *(f"dk{i}" for i in range(1, subs))]),
        _stacked("dqt_rows", ["zero_sk", *(f"dq{i}" for i in range(1, subs))]),
        _stacked("db_rows", ["zero_sk", *(f"db{i}" for i in range(1, subs))]),
        "dkt = dkt + dkt_rows",
        "dqt = dqt + dqt_rows",
        "db = db + db_rows",
        f"for t in range({SUB}):",
        *("    " + line for line in _sub_chunk_column(s)),
        "    aj = ct.sum(ct.where(column, dkk, 0.0), axis=1, keepdims=True)",
        "    aj2 = ct.sum(ct.where(column, dqk, 0.0), axis=1, keepdims=True)",
        "    dkt = dkt + aj * partner_k * ej",
        "    dqt = dqt + aj2 * partner_k * ej",
        "    xj = (aj * kt + aj2 * qt) * ej",
        "    yj = xj * partner_k",
        f"    dkt = dkt + ct.where(sub_row == t, {_spread(s, 'xj', '')}, 0.0)",
        f"    db = db + yj - ct.where(sub_row == t, {_spread(s, 'yj', '')}, 0.0)",
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


def _state_slot(slot: str) -> str:
    """The positions of chunk slot ``slot``'s [KP, VW] part of a saved state (KP x VP a slot and head)."""
    return f"(({slot} * H + head) * KP + ct.reshape(kcols, (KP, 1))) * VP + vcols2"


def states_source(s: DeltaRuleShape) -> KernelSource:
    """The backward's forward walk a (sequence, head, value block): each chunk's start state into ``saved``."""
    chunk = [
        *_rows(),
        *_keys(s),
        f"ct.scatter(saved, {_state_slot(SEQUENCE_SLOT)}, state)",
        _chunk_rows(SEQUENCE_SLOT),
        *_corrections(),
        *_carry(s),
    ]
    body = [
        *_sequence_setup(_value_block(), "k"),
        _initial(s),
        "for chunk in range(chunks):",
        *("    " + line for line in chunk),
    ]
    return _module(s, "delta_rule_states", "k, g, cu, h0, w_work, u_work, saved", body, s.value_width)


def reverse_source(s: DeltaRuleShape) -> KernelSource:
    """The backward's reverse walk a (sequence, head, value block): d(state) at each chunk's end into ``dsaved``,
    carried to the chunk before through the chunk's outputs and its corrections u, and d(initial state) at the
    end. Only the products that involve d(state) or dO: the chunk's own gradients are ``gradients_source``'s."""
    rows = "KP" if s.per_channel else "1"
    chunk = [
        "chunk = chunks - 1 - back",
        *_rows(),
        *_queries(s),
        *_keys(s),
        _beta(),
        *_decay_to_chunk_end(),
        f"ct.scatter(dsaved, {_state_slot(SEQUENCE_SLOT)}, dstate)",
        _chunk_rows(SEQUENCE_SLOT),
        OUTPUT_GRADIENT,
        "qk = ct.gather(qk_work, at * C + ccols2)",
        "du = dot(ct.transpose(qk), do, dot(carried, dstate, zero_cv))",
        "de = bt * dot(ct.transpose(ct.gather(t_work, at * C + ccols2)), du, zero_cv)",
        f"dstate = dstate * ct.reshape(ct.exp(b_last), ({rows}, 1))",
        "dstate = dstate + dot(ct.transpose(qt * ct.exp(b)), do, zero_kv) - dot(ct.transpose(kt * ct.exp(b)), de, zero_kv)",
    ]
    body = [
        *_sequence_setup(_value_block()),
        "zero_kv = ct.full((KP, VW), 0.0, dtype=ct.float32)",
        (
            "dstate = ct.astype(ct.gather(dht, state_at, mask=state_in), ct.float32)"
            if s.final_state
            else "dstate = zero_kv"
        ),
        "for back in range(chunks):",
        *("    " + line for line in chunk),
        *(["ct.scatter(dh0, state_at, ct.astype(dstate, dh0.dtype), mask=state_in)"] if s.initial_state else []),
    ]
    params = "q, k, g, beta, cu, d_o, dht, qk_work, t_work, dh0, dsaved"
    return _module(s, "delta_rule_reverse", params, body, s.value_width)


def _value_gradients(s: DeltaRuleShape) -> list[str]:
    """One block of VW value columns of the chunk's gradients: its share of every sum over V (dqk, dqg, dkd,
    dinv, dkg, d(beta)'s, state . dstate) added in, and dv's columns stored. A block at a time, so at most
    [KP, VW] of the state and of d(state) are live (K = V = 128 held both whole: the compiler spilled)."""
    state_dot = (
        "sdd = sdd + ct.reshape(ct.sum(state * dstate, axis=1), (1, KP))"
        if s.per_channel
        else "sdd = sdd + ct.reshape(ct.sum(state * dstate), (1, 1))"
    )
    return [
        "vcols2 = ct.reshape(vb * VW + ct.arange(VW, dtype=ct.int32), (1, VW))",
        "vin2 = vcols2 < V",
        VALUE_AT,
        _value_tile(),
        f"state = ct.gather(saved, {_state_slot('slot')})",
        f"dstate = ct.gather(dsaved, {_state_slot('slot')})",
        "e = vt - dot(kg, state, zero_cv)",
        "u = dot(inverse, bt * e, zero_cv)",
        OUTPUT_GRADIENT,
        "du = dot(ct.transpose(qk), do, dot(carried, dstate, zero_cv))",
        "dqk = dot(do, ct.transpose(u), dqk)",
        "dqg = dot(do, ct.transpose(state), dqg)",
        "dkd = dot(u, ct.transpose(dstate), dkd)",
        state_dot,
        "dy = dot(ct.transpose(inverse), du, zero_cv)",
        "dinv = dot(du, ct.transpose(bt * e), dinv)",
        "dbeta = dbeta + ct.sum(dy * e, axis=1, keepdims=True)",
        "de = bt * dy",
        "dkg = dot(de, ct.transpose(state), dkg)",
        "ct.scatter(dv, v_at, ct.astype(de, dv.dtype), mask=valid2 & vin2)",
    ]


def gradients_source(s: DeltaRuleShape) -> KernelSource:
    """Each chunk's gradients at once (a block per chunk slot and head), from its start state and its end's
    d(state) (the walks' ``saved`` and ``dsaved``), the rest recomputed: T too, as tileiras (cuda-tile 1.x) fails
    kda's kernel with T gathered from the chunk kernel's ("Invalid use-def chain in schedule"). The products with
    the state or a value run a block of VW value columns at a time (``_value_gradients``). gdn's kernel stores dq,
    dk, dv, dg and dbeta; kda's stores dv and dbeta and hands the rest over in the workspace (``HANDED_OVER``) to
    ``pairs_source``, whose launch adds the pair gradients through the per-channel decays."""
    if s.per_channel:
        db_last = "db_last = sdd * ct.exp(b_last) + ct.sum(carried * dkd, axis=0, keepdims=True)"
        db = "db = kg * dkg + qg * dqg - carried * dkd"
        sdd = "sdd = ct.full((1, KP), 0.0, dtype=ct.float32)"
    else:
        db_last = "db_last = sdd * ct.exp(b_last) + ct.reshape(ct.sum(carried * dkd), (1, 1))"
        db = "db = ct.sum(kg * dkg + qg * dqg - carried * dkd, axis=1, keepdims=True)"
        sdd = "sdd = ct.full((1, 1), 0.0, dtype=ct.float32)"
    chunk = [
        *_rows(),
        *_queries(s),
        *_keys(s),
        _beta(),
        *_pair_products(s),
        *_inverse(s),
        "kg = kt * ct.exp(b)",
        *_decay_to_chunk_end(),
        "qg = qt * ct.exp(b)",
        "dqk = zero_cc",
        "dinv = zero_cc",
        "dqg = zero_ck",
        "dkd = zero_ck",
        "dkg = zero_ck",
        "dbeta = ct.full((C, 1), 0.0, dtype=ct.float32)",
        sdd,
        "for vb in range(VP // VW):",
        *("    " + line for line in _value_gradients(s)),
        "dqk = ct.where(lower, dqk, 0.0)",
        "dkg = -dkg",
        db_last,
        "dm = ct.where(strict, -dot(dot(ct.transpose(inverse), dinv, zero_cc), ct.transpose(inverse), zero_cc), 0.0)",
        "dbeta = dbeta + ct.sum(dm * kk, axis=1, keepdims=True)",
        "dkk = dm * bt",
        "dkt = ct.exp(b) * dkg + ct.exp(b_last - b) * dkd",
        "dqt = ct.exp(b) * dqg",
        db,
        *(_hand_over() if s.per_channel else [*_decay_matrix_pair_gradients(), LAST_ROW_GATE, *_input_gradients(s)]),
        "ct.scatter(dbeta_out, rows2 * H + head, ct.astype(dbeta, dbeta_out.dtype), mask=valid2)",
    ]
    body = [
        *_slot_setup(s),
        "last = ct.reshape(steps == C - 1, (C, 1))",
        "for _ in range(mine):",
        *("    " + line for line in chunk),
    ]
    if s.per_channel:
        params = f"q, k, v, g, beta, cu, d_o, saved, dsaved, {_handed_over_params()}, dv, dbeta_out"
    else:
        params = "q, k, v, g, beta, cu, d_o, saved, dsaved, dq, dk, dv, dg, dbeta_out"
    return _module(s, "delta_rule_grads", params, body, s.value_width)


LAST_ROW_GATE = "db = db + ct.where(last, db_last, 0.0)"  # db's share through the chunk's decay b_L

# What kda's gradients kernel hands ``pairs_source``, a float32 workspace array each (``<name>_work``, C rows a
# chunk slot and head), by columns: its share of dq~, dk~ and db, and the gradients of QK and KK.
HANDED_OVER = {"dqt": "KP", "dkt": "KP", "db": "KP", "dqk": "C", "dkk": "C"}
_COLUMN_INDICES = {"KP": "kcols2", "C": "ccols2"}


def handed_over_widths(s: DeltaRuleShape) -> list[int]:
    """The columns of each ``HANDED_OVER`` array, in its order."""
    return [{"KP": s.kp, "C": s.chunk}[columns] for columns in HANDED_OVER.values()]


def _handed_over_params() -> str:
    """The ``HANDED_OVER`` arrays as kernel parameters, in its order."""
    return ", ".join(f"{name}_work" for name in HANDED_OVER)


def _handed_over_at(columns: str) -> str:
    """The flat positions of the chunk's rows ``at`` in a handed-over array of ``columns`` columns."""
    return f"at * {columns} + {_COLUMN_INDICES[columns]}"


def _hand_over() -> list[str]:
    """kda's gradients kernel's end: the ``HANDED_OVER`` tiles (db with its last row's share) into the workspace."""
    return [
        LAST_ROW_GATE,
        _chunk_rows("slot"),
        *(f"ct.scatter({name}_work, {_handed_over_at(columns)}, {name})" for name, columns in HANDED_OVER.items()),
    ]


def _take_over() -> list[str]:
    """``pairs_source``'s start: the ``HANDED_OVER`` tiles of its chunk slot and head, from the workspace."""
    return [
        _chunk_rows("slot"),
        *(f"{name} = ct.gather({name}_work, {_handed_over_at(columns)})" for name, columns in HANDED_OVER.items()),
    ]


def _input_gradients(s: DeltaRuleShape) -> list[str]:
    """dq, dk and dg stored, from the chunk's whole dq~, dk~ and db: dg by the reverse row sums of db, dq and dk
    back through the scale and the l2 norm."""
    return [
        *_row_sums(s, "dg_t", "ct.transpose(ones_below)", "db"),
        *_unnormalized(s),
        "ct.scatter(dq, qk_at, ct.astype(dqr, dq.dtype), mask=valid2 & kin2)",
        "ct.scatter(dk, qk_at, ct.astype(dkr, dk.dtype), mask=valid2 & kin2)",
        (
            "ct.scatter(dg, qk_at, ct.astype(dg_t, dg.dtype), mask=valid2 & kin2)"
            if s.per_channel
            else "ct.scatter(dg, rows2 * H + head, ct.astype(dg_t, dg.dtype), mask=valid2)"
        ),
    ]


def pairs_source(s: DeltaRuleShape) -> KernelSource:
    """kda's pair gradients, a launch of their own after ``gradients_source`` (a block per chunk slot and head):
    dq~, dk~ and db through the per-channel pair decays, from the gradients of KK and QK the gradients kernel
    handed over, added to its share, then dq, dk and dg stored. In one kernel the sub-chunk block rows' [C, K]
    temporaries on top of what the value walk keeps live spilled 11,800 B a thread; apart, the gradients kernel
    spills 5,792 B and this one 3,272 (sm_90 cubins, K = V = 128, TF32, read offline)."""
    chunk = [
        *_rows(),
        *_queries(s),
        *_keys(s),
        *_take_over(),
        *_sub_chunk_setup(),
        *_sub_chunk_pair_gradients(s),
        *_input_gradients(s),
    ]
    body = [
        *_slot_setup(s),
        "for _ in range(mine):",
        *("    " + line for line in chunk),
    ]
    params = f"q, k, g, cu, {_handed_over_params()}, dq, dk, dg"
    return _module(s, "delta_rule_pairs", params, body, s.value_width)
